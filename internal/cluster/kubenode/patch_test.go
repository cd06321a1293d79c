package kubenode

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeStatusPatch(t *testing.T) {
	t.Parallel()
	base := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "7"},
		Spec:       v1.NodeSpec{PodCIDR: "10.0.0.0/24"},
		Status: v1.NodeStatus{
			Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeHostName, Address: "n1"}},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}},
		},
	}
	tests := []struct {
		name   string
		change func(n *v1.Node)
		want   string
	}{
		{"nothing", func(*v1.Node) {}, `{}`},
		{"spec is left out", func(n *v1.Node) { n.Spec.PodCIDR = "10.9.0.0/24" }, `{}`},
		{"condition", func(n *v1.Node) { n.Status.Conditions[0].Status = v1.ConditionTrue },
			`{"status":{"$setElementOrder/conditions":[{"type":"Ready"}],"conditions":[{"status":"True","type":"Ready"}]}}`},
		{"addresses are replaced whole", func(n *v1.Node) {
			n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeInternalIP, Address: "10.0.0.3"}}
		}, `{"status":{"addresses":[{"address":"10.0.0.2","type":"InternalIP"},{"address":"10.0.0.3","type":"InternalIP"},{"$patch":"replace"}]}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			updated := base.DeepCopy()
			tc.change(updated)
			got, err := nodeStatusPatch(base, updated)
			if err != nil {
				t.Fatal(err)
			}
			var gotV, wantV any
			if err := json.Unmarshal(got, &gotV); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &wantV); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantV, gotV); diff != "" {
				t.Errorf("patch %s (-want +got)\n%s", got, diff)
			}
		})
	}
}

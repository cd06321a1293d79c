package preemption

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/qos"
)

// fuzzResources are the resources fuzzed pods request and requirements name.
var fuzzResources = []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, "example.com/gpu", v1.ResourcePods}

// byteReader hands out the fuzzer's bytes; it returns 0 once they run out.
type byteReader struct{ b []byte }

func (r *byteReader) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// fuzzCase decodes a preemptor, running pods and requirements from data. Small
// values make ties, the interesting case, frequent.
func fuzzCase(data []byte) (*v1.Pod, []*v1.Pod, Requirements) {
	r := &byteReader{b: data}
	preemptor := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "preemptor"}}
	switch r.next() % 3 {
	case 0:
		preemptor.Annotations = map[string]string{qos.ConfigSourceAnnotation: "file"}
	case 1:
		p := int32(r.next())
		preemptor.Spec.Priority = &p
	default:
		p := qos.SystemCriticalPriority + int32(r.next())
		preemptor.Spec.Priority = &p
	}
	var reqs Requirements
	for n := 1 + int(r.next()%4); n > 0; n-- {
		b := r.next()
		reqs = append(reqs, Requirement{Resource: fuzzResources[int(b)%len(fuzzResources)], Quantity: int64(r.next()%32) - 2})
	}
	var pods []*v1.Pod
	for i := 0; len(r.b) > 0 && i < 200; i++ {
		kind := r.next()
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprint(i))}}
		if kind&0x10 != 0 {
			prio := int32(r.next())
			if kind&0x20 != 0 {
				prio += qos.SystemCriticalPriority
			}
			p.Spec.Priority = &prio
		}
		if kind&0x40 != 0 {
			p.Annotations = map[string]string{qos.ConfigSourceAnnotation: "file"}
		}
		reqList := v1.ResourceList{}
		for _, name := range fuzzResources[:4] {
			if v := r.next() % 8; v > 0 {
				q := resource.NewQuantity(int64(v), resource.DecimalSI)
				if name == v1.ResourceCPU {
					q = resource.NewMilliQuantity(int64(v), resource.DecimalSI)
				}
				reqList[name] = *q
			}
		}
		c := v1.Container{Name: "c"}
		switch kind % 3 {
		case 0: // BestEffort in cpu and memory
			delete(reqList, v1.ResourceCPU)
			delete(reqList, v1.ResourceMemory)
			c.Resources.Requests = reqList
		case 1:
			c.Resources.Requests = reqList
		default:
			c.Resources.Requests = reqList
			c.Resources.Limits = reqList.DeepCopy()
		}
		p.Spec.Containers = []v1.Container{c}
		pods = append(pods, p)
	}
	return preemptor, pods, reqs
}

// FuzzSelectVictims checks that victim selection never panics, matches the
// kubelet's algorithm, and that the victims it returns free the requirement and are
// all preemptable.
func FuzzSelectVictims(f *testing.F) {
	f.Add([]byte{0, 1, 0, 20, 1, 10, 7, 7, 7, 7, 2, 3, 3, 3, 3})
	f.Add([]byte{2, 5, 3, 4, 30, 1, 30, 2, 9, 4, 9, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 0, 5, 5, 5, 5})
	f.Fuzz(func(t *testing.T, data []byte) {
		preemptor, pods, reqs := fuzzCase(data)
		got, err := SelectVictims(preemptor, pods, reqs)
		want, refErr := referenceSelect(preemptor, pods, reqs)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("err = %v, kubelet algorithm err = %v", err, refErr)
		}
		if err != nil {
			if !errors.Is(err, ErrNoVictims) {
				t.Fatalf("err = %v, want ErrNoVictims", err)
			}
			return
		}
		if diff := cmp.Diff(names(want), names(got)); diff != "" {
			t.Fatalf("victims differ from the kubelet's algorithm (-kubelet +got):\n%s", diff)
		}
		seen := map[*v1.Pod]bool{}
		for _, v := range got {
			if seen[v] {
				t.Fatalf("victim %s chosen twice", v.Name)
			}
			seen[v] = true
			if !Preemptable(preemptor, v) {
				t.Fatalf("victim %s is not preemptable", v.Name)
			}
		}
		for _, req := range reqs {
			var freed int64
			for _, v := range got {
				freed += Request(v, req.Resource)
			}
			if freed < req.Quantity {
				t.Fatalf("victims free %d of %s, want >= %d", freed, req.Resource, req.Quantity)
			}
		}
	})
}

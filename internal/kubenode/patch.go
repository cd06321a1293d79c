package kubenode

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/nodekeeper/nodekeeper/internal/kubeclient"
)

// patchNodeStatus writes updated's status (and metadata) over old's with a
// strategic merge patch of the status subresource, as the kubelet does
// (component-helpers' PatchNodeStatus, which takes client-go's clientset).
func patchNodeStatus(ctx context.Context, nodes kubeclient.NodeInterface, old, updated *v1.Node) (*v1.Node, error) {
	patch, err := nodeStatusPatch(old, updated)
	if err != nil {
		return nil, fmt.Errorf("node %q status patch: %w", old.Name, err)
	}
	written, err := nodes.Patch(ctx, old.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("patch node %q status with %s: %w", old.Name, patch, err)
	}
	return written, nil
}

// nodeStatusPatch is the two-way strategic merge patch from old to updated,
// spec left out. Status addresses are merged by type in the API's patch
// strategy, which cannot express every change of the list: when they
// changed, the patch replaces the list whole.
func nodeStatusPatch(old, updated *v1.Node) ([]byte, error) {
	oldJSON, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	replaceAddresses := len(old.Status.Addresses) > 0 && !equality.Semantic.DeepEqual(old.Status.Addresses, updated.Status.Addresses)
	target := updated.DeepCopy()
	target.Spec = old.Spec
	if replaceAddresses {
		target.Status.Addresses = old.Status.Addresses
	}
	newJSON, err := json.Marshal(target)
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Node{})
	if err != nil || !replaceAddresses {
		return patch, err
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	status, _ := m["status"].(map[string]any)
	if status == nil {
		status = map[string]any{}
		m["status"] = status
	}
	addrs := make([]any, 0, len(updated.Status.Addresses)+1)
	for _, a := range updated.Status.Addresses {
		addrs = append(addrs, map[string]any{"type": string(a.Type), "address": a.Address})
	}
	status["addresses"] = append(addrs, map[string]any{"$patch": "replace"})
	return json.Marshal(m)
}

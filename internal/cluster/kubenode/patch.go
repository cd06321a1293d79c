package kubenode

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
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
// spec left out, as the API machinery's CreateTwoWayMergePatch computes it
// for a Node (byte for byte, tests hold, but for the order of unsorted
// finalizers, which it compares sorted). Status addresses are merged by
// type in the API's patch strategy, which cannot express every change of
// the list: when they changed, the patch replaces the list whole.
func nodeStatusPatch(old, updated *v1.Node) ([]byte, error) {
	original, err := toJSONObject(old)
	if err != nil {
		return nil, err
	}
	modified, err := toJSONObject(updated)
	if err != nil {
		return nil, err
	}
	delete(original, "spec")
	delete(modified, "spec")
	replaceAddresses := len(old.Status.Addresses) > 0 && !slices.Equal(old.Status.Addresses, updated.Status.Addresses)
	var addresses []any
	if replaceAddresses {
		removeStatusField(original, "addresses")
		addresses, _ = removeStatusField(modified, "addresses").([]any)
	}
	patch, err := diffObjects("", original, modified)
	if err != nil {
		return nil, err
	}
	if replaceAddresses {
		status, _ := patch["status"].(map[string]any)
		if status == nil {
			status = map[string]any{}
			patch["status"] = status
		}
		status["addresses"] = append(addresses, map[string]any{directiveKey: "replace"})
	}
	return json.Marshal(patch)
}

// toJSONObject is obj's JSON encoding decoded as a generic object, numbers
// kept as written.
func toJSONObject(obj any) (map[string]any, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// removeStatusField deletes field from node's status object and returns its
// value, nil if it had none.
func removeStatusField(node map[string]any, field string) any {
	status, _ := node["status"].(map[string]any)
	v := status[field]
	delete(status, field)
	return v
}

// Keys of a strategic merge patch that are directives to the API server
// rather than fields.
const (
	directiveKey              = "$patch"
	setElementOrderPrefix     = "$setElementOrder/"
	deleteFromPrimitivePrefix = "$deleteFromPrimitiveList/"
)

// listStrategy is how the API server applies a list field of a Node in a
// strategic merge patch. The zero value replaces the list whole.
type listStrategy struct {
	// mergeKey, when set, merges a list of objects element by element,
	// matched by the value of this field.
	mergeKey string
	// set merges a list of scalars as a set.
	set bool
}

// nodeListStrategies are the Node's lists, by their path below the
// object's root, that the API merges (the patchStrategy and patchMergeKey
// tags of k8s.io/api's core/v1 and apimachinery's ObjectMeta). Every other
// list of a Node is replaced whole. The spec is never diffed.
var nodeListStrategies = map[string]listStrategy{
	"metadata.finalizers":      {set: true},
	"metadata.ownerReferences": {mergeKey: "uid"},
	"status.addresses":         {mergeKey: "type"},
	"status.conditions":        {mergeKey: "type"},
}

// diffObjects is the patch that turns the JSON object original, found at
// path, into modified: changed and added fields, removed ones set to null,
// objects diffed field by field and lists by their strategy. Nothing
// unchanged is in it.
func diffObjects(path string, original, modified map[string]any) (map[string]any, error) {
	patch := map[string]any{}
	for key, mod := range modified {
		orig, ok := original[key]
		if !ok || reflect.TypeOf(orig) != reflect.TypeOf(mod) {
			patch[key] = mod
			continue
		}
		var err error
		switch orig := orig.(type) {
		case map[string]any:
			err = diffObjectField(patch, key, joinPath(path, key), orig, mod.(map[string]any))
		case []any:
			err = diffListField(patch, key, joinPath(path, key), orig, mod.([]any))
		default:
			if !reflect.DeepEqual(orig, mod) {
				patch[key] = mod
			}
		}
		if err != nil {
			return nil, err
		}
	}
	for key := range original {
		if _, ok := modified[key]; !ok {
			patch[key] = nil
		}
	}
	return patch, nil
}

// joinPath is the path of field key in the object at path.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// diffObjectField adds to patch the changes of the object field key.
func diffObjectField(patch map[string]any, key, path string, original, modified map[string]any) error {
	fields, err := diffObjects(path, original, modified)
	if err != nil {
		return err
	}
	if len(fields) > 0 {
		patch[key] = fields
	}
	return nil
}

// diffListField adds to patch the changes of the list field key, following
// its strategy.
func diffListField(patch map[string]any, key, path string, original, modified []any) error {
	strategy := nodeListStrategies[path]
	switch {
	case len(original) == 0 && (strategy.mergeKey != "" || strategy.set):
		// A merged list that was empty gets the new elements as they are.
		if len(modified) > 0 {
			patch[key] = modified
		}
		return nil
	case strategy.mergeKey != "":
		return diffMergedList(patch, key, path, strategy.mergeKey, original, modified)
	case strategy.set:
		diffSetList(patch, key, original, modified)
		return nil
	default:
		if !reflect.DeepEqual(original, modified) {
			patch[key] = modified
		}
		return nil
	}
}

// diffMergedList adds to patch the changes of a list of objects merged by
// mergeKey: changed elements with only their changed fields and the key,
// added elements whole, in the order of modified, then a delete directive
// for each element removed. When anything changed, or only the order did,
// a $setElementOrder directive lists modified's keys in their new order.
func diffMergedList(patch map[string]any, key, path, mergeKey string, original, modified []any) error {
	origByKey := make(map[string]map[string]any, len(original))
	for _, e := range original {
		obj, k, err := mergeKeyOf(e, mergeKey)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		origByKey[k] = obj
	}
	var changes []any
	order := make([]any, 0, len(modified))
	seen := make(map[string]bool, len(modified))
	for _, e := range modified {
		obj, k, err := mergeKeyOf(e, mergeKey)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		order = append(order, map[string]any{mergeKey: obj[mergeKey]})
		seen[k] = true
		change, err := diffMergedElement(path, mergeKey, origByKey[k], obj)
		if err != nil {
			return err
		}
		if change != nil {
			changes = append(changes, change)
		}
	}
	changes = append(changes, deleteDirectives(original, mergeKey, seen)...)
	if len(changes) > 0 {
		patch[key] = changes
	}
	if len(order) > 0 && (len(changes) > 0 || !sameKeyOrder(original, modified, mergeKey)) {
		patch[setElementOrderPrefix+key] = order
	}
	return nil
}

// diffMergedElement is the patch entry of one element of a merged list: the
// element whole if it is new (original nil), its changed fields with its
// merge key if it changed, nil if it did not.
func diffMergedElement(path, mergeKey string, original, modified map[string]any) (map[string]any, error) {
	if original == nil {
		return modified, nil
	}
	fields, err := diffObjects(path, original, modified)
	if err != nil || len(fields) == 0 {
		return nil, err
	}
	fields[mergeKey] = modified[mergeKey]
	return fields, nil
}

// deleteDirectives are the delete directives of original's elements whose
// merge key is not in kept, ordered by key.
func deleteDirectives(original []any, mergeKey string, kept map[string]bool) []any {
	type removed struct {
		key   string
		value any
	}
	var gone []removed
	for _, e := range original {
		obj := e.(map[string]any)
		if k := fmt.Sprint(obj[mergeKey]); !kept[k] {
			gone = append(gone, removed{k, obj[mergeKey]})
		}
	}
	slices.SortStableFunc(gone, func(a, b removed) int { return cmp.Compare(a.key, b.key) })
	directives := make([]any, 0, len(gone))
	for _, g := range gone {
		directives = append(directives, map[string]any{mergeKey: g.value, directiveKey: "delete"})
	}
	return directives
}

// mergeKeyOf returns the list element e as an object and the text of its
// merge key.
func mergeKeyOf(e any, mergeKey string) (map[string]any, string, error) {
	obj, ok := e.(map[string]any)
	if !ok {
		return nil, "", fmt.Errorf("element %v of a merged list is not an object", e)
	}
	v, ok := obj[mergeKey]
	if !ok {
		return nil, "", fmt.Errorf("element %v has no merge key %q", e, mergeKey)
	}
	return obj, fmt.Sprint(v), nil
}

// sameKeyOrder reports whether original and modified hold the same merge
// keys in the same order.
func sameKeyOrder(original, modified []any, mergeKey string) bool {
	return slices.EqualFunc(original, modified, func(a, b any) bool {
		return fmt.Sprint(a.(map[string]any)[mergeKey]) == fmt.Sprint(b.(map[string]any)[mergeKey])
	})
}

// diffSetList adds to patch the changes of a list of scalars merged as a
// set: the values added, in modified's order; a $deleteFromPrimitiveList
// directive with the values removed, sorted; and, when the list changed, a
// $setElementOrder directive with the whole new list.
func diffSetList(patch map[string]any, key string, original, modified []any) {
	inOriginal := scalarSet(original)
	inModified := scalarSet(modified)
	var added, removed []any
	for _, v := range modified {
		if !inOriginal[fmt.Sprint(v)] {
			added = append(added, v)
		}
	}
	for _, v := range original {
		if !inModified[fmt.Sprint(v)] {
			removed = append(removed, v)
		}
	}
	slices.SortStableFunc(removed, func(a, b any) int { return cmp.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	if len(added) > 0 {
		patch[key] = added
	}
	if len(removed) > 0 {
		patch[deleteFromPrimitivePrefix+key] = removed
	}
	if len(modified) > 0 && !reflect.DeepEqual(original, modified) {
		patch[setElementOrderPrefix+key] = modified
	}
}

// scalarSet is the set of the texts of list's values.
func scalarSet(list []any) map[string]bool {
	set := make(map[string]bool, len(list))
	for _, v := range list {
		set[fmt.Sprint(v)] = true
	}
	return set
}

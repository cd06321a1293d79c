package criconfig

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// SubPath is the path inside its volume that volume mount vm mounts: its
// subPath, or its subPathExpr with the $(VAR) references expanded from the
// container's environment vars (a variable that is missing or empty is an
// error, as with the kubelet). written is the path as the spec gives it
// (expanded), clean the same made clean, "" for the whole volume; a path
// that leaves the volume is an error. An error names the field, not the
// container: the caller adds which volumeMounts entry it is.
func SubPath(vm v1.VolumeMount, vars map[string]string) (clean, written string, err error) {
	written = vm.SubPath
	if vm.SubPathExpr != "" {
		if written, err = expandSubPath(vm.SubPathExpr, vars); err != nil {
			return "", "", fmt.Errorf("subPathExpr %q: %w", vm.SubPathExpr, err)
		}
	}
	if written == "" {
		return "", "", nil
	}
	clean = filepath.Clean(written)
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", "", fmt.Errorf("subPath %q leaves the volume", written)
	}
	return clean, written, nil
}

// expandSubPath expands the $(VAR) references of a subPathExpr from vars.
func expandSubPath(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := nodeapi.ExpandVars(expr, func(n string) (string, bool) {
		v, ok := vars[n]
		if !ok || v == "" {
			missing = append(missing, n)
		}
		return v, ok
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return "", fmt.Errorf("missing value for %s", strings.Join(slices.Compact(missing), ", "))
	}
	return out, nil
}

package daemon

import (
	"path/filepath"

	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
)

// setUpDataDirs makes rootDir/pods, and takes other users' permissions away
// from rootDir and rootDir/pods where they have them (podruntime.RestrictDirs:
// an older nodekeeper made both 0755), as the kubelet's setupDataDirs, so
// that an upgrade closes what that mode left open. It runs once the root
// directory is made and locked; it is idempotent.
func setUpDataDirs(rootDir string) error {
	return podruntime.RestrictDirs(rootDir, filepath.Join(rootDir, "pods"))
}

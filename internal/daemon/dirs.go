package daemon

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// dataDirMode is the mode of the root directory and its pods directory, as
// the kubelet's (setupDataDirs): other local users can neither list nor
// traverse them, so the pods' volumes (an emptyDir is 0777, for containers
// of any user), hosts files, termination messages and the agent's own state
// below are out of their reach.
const dataDirMode fs.FileMode = 0o750

// setUpDataDirs makes rootDir/pods, and takes other users' permissions away
// from rootDir and rootDir/pods where they have them (an older nodekeeper
// made both 0755), so that an upgrade closes what that mode left open. It
// runs once the root directory is made and locked; it is idempotent.
func setUpDataDirs(rootDir string) error {
	for _, dir := range []string{rootDir, filepath.Join(rootDir, "pods")} {
		if err := os.MkdirAll(dir, dataDirMode); err != nil {
			return err
		}
		info, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if extra := info.Mode().Perm() &^ dataDirMode; extra != 0 {
			if err := os.Chmod(dir, info.Mode()&^extra); err != nil {
				return fmt.Errorf("restrict %s to mode %v: %w", dir, dataDirMode, err)
			}
		}
	}
	return nil
}

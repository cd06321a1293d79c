package daemon

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/machine/containerd"
)

// ErrAgentRunning is the class of the error for a root directory another
// nodekeeper holds (its lock is taken).
var ErrAgentRunning = errors.New("another nodekeeper is running with it")

// containerdDir is the managed containerd's state directory under the root
// directory.
func containerdDir(rootDir string) string { return filepath.Join(rootDir, "containerd") }

// RuntimeCgroup is the cgroup the managed containerd (and its shims) run in
// when --runtime-cgroups is not given: "nodekeeper-containerd" under
// cgroupRoot, next to kubepods, with the root directory's hash appended
// (as BridgeName's) unless rootDir is DefaultRootDir, so that two agents on
// one machine keep their runtimes apart.
func RuntimeCgroup(cgroupRoot, rootDir string) string {
	name := "nodekeeper-containerd"
	if b := BridgeName(rootDir); rootDir != DefaultRootDir {
		name += "-" + b[len("nk"):]
	}
	return path.Join("/", cgroupRoot, name)
}

// StopRuntime stops the managed containerd a `nodekeeper run` on rootDir left
// running (it was killed, or stopped without its ctx ending): SIGTERM, then
// SIGKILL after timeout, through the pid file, so a process that merely got
// its pid is never signalled. The pods keep running, as when the agent
// stops. It holds rootDir's lock while it works, and refuses with an error
// wrapping ErrAgentRunning when an agent holds it: that agent stops its
// containerd when it stops. It returns the pid it stopped, 0 when none ran,
// and whether SIGKILL was needed. A rootDir that is not a directory is a
// ConfigError.
func StopRuntime(rootDir string, timeout time.Duration) (pid int, killed bool, err error) {
	if st, err := os.Stat(rootDir); err != nil || !st.IsDir() {
		return 0, false, ConfigError{fmt.Errorf("--root-dir %q: want the directory of a nodekeeper run", rootDir)}
	}
	// The pid file records absolute paths (containerd's --config).
	if rootDir, err = filepath.Abs(rootDir); err != nil {
		return 0, false, err
	}
	unlock, err := lockRoot(rootDir)
	if err != nil {
		var ce ConfigError
		if errors.As(err, &ce) {
			err = ce.Err // a running agent is no usage error
		}
		return 0, false, err
	}
	defer unlock()
	return containerd.StopRecorded(containerdDir(rootDir), timeout)
}

package daemon

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// DefaultOOMScoreAdj is the agent's own oom_score_adj, as the kubelet's
// --oom-score-adj default (qos.KubeletOOMScoreAdj).
const DefaultOOMScoreAdj = -999

// selfOOMScoreAdj is the agent's own oom_score_adj file.
const selfOOMScoreAdj = "/proc/self/oom_score_adj"

// setOOMScoreAdj writes score to an oom_score_adj file (path), the kubelet's
// --oom-score-adj applied to itself, and returns the value the file holds
// afterwards. The kernel refuses to lower it without CAP_SYS_RESOURCE (the
// case on machines that refuse negative scores); the error then says so and
// the caller warns and goes on with the value it has.
func setOOMScoreAdj(path string, score int) (int, error) {
	if score < -1000 || score > 1000 {
		return 0, fmt.Errorf("oom_score_adj %d is outside [-1000, 1000]", score)
	}
	werr := os.WriteFile(path, []byte(strconv.Itoa(score)), 0o644)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", path, strings.TrimSpace(string(b)))
	}
	if werr != nil {
		return cur, fmt.Errorf("set %s to %d: %w (it stays %d)", path, score, werr, cur)
	}
	return cur, nil
}

// containerOOMGroup is whether each container's cgroup gets
// memory.oom.group=1, so that an OOM kill ends the whole container, as the
// kubelet decides it from the machine's cgroup version (v2) and
// singleProcessOOMKill (nil: unset): on v2 unless singleProcessOOMKill is
// true; never on v1, which kills single processes only (config.HostErr
// refuses an explicit false there).
func containerOOMGroup(v2 bool, singleProcessOOMKill *bool) bool {
	return v2 && (singleProcessOOMKill == nil || !*singleProcessOOMKill)
}

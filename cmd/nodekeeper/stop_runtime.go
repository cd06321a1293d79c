package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodekeeper/nodekeeper/internal/daemon"
)

// newStopRuntimeCmd is `nodekeeper stop-runtime`: it stops the containerd
// that a `nodekeeper run` left running on its root directory.
func newStopRuntimeCmd() *cobra.Command {
	var rootDir string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "stop-runtime [--root-dir DIR] [--timeout DURATION]",
		Short: "Stop the containerd a killed 'nodekeeper run' left running",
		Long: `'nodekeeper run' starts its own containerd, which outlives the agent: an
agent that is killed leaves it running, and the next 'nodekeeper run' on the
same root directory adopts it. stop-runtime stops that containerd (SIGTERM,
then SIGKILL after --timeout), found through DIR/containerd/containerd.pid:
only the process recorded there, with its start time, is signalled. The pods
keep running, as when the agent stops, and the next 'nodekeeper run' adopts
them. It refuses while an agent runs on DIR: stopping that agent (Ctrl-C,
SIGTERM) stops its containerd.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return badInput(fmt.Errorf("--timeout %s: want a positive duration", timeout))
			}
			pid, killed, err := daemon.StopRuntime(rootDir, timeout)
			var ce daemon.ConfigError
			switch {
			case errors.As(err, &ce):
				return badInput(err)
			case errors.Is(err, daemon.ErrAgentRunning):
				return fmt.Errorf("%w; stop that agent instead (it stops its containerd)", err)
			case err != nil:
				return err
			case pid == 0:
				fmt.Fprintf(cmd.OutOrStdout(), "no containerd of %s is running\n", rootDir)
			case killed:
				fmt.Fprintf(cmd.OutOrStdout(), "containerd (pid %d) of %s killed: it ignored SIGTERM for %s\n", pid, rootDir, timeout)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "containerd (pid %d) of %s stopped\n", pid, rootDir)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rootDir, "root-dir", daemon.DefaultRootDir, "the root directory of the 'nodekeeper run' whose containerd to stop")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long containerd gets to exit on SIGTERM before SIGKILL")
	return cmd
}

// Command nodekeeper is a node agent that does the kubelet's node-level resource
// management: eviction, OOM scores, garbage collection, device plugins, probes and
// critical-pod preemption. See docs/commands.md for the commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/spf13/cobra"
)

// version, when set at link time with -ldflags "-X main.version=...", is the
// version printed; otherwise it comes from the build information.
var version string

// exitUsage is the exit code for usage errors and bad input.
const exitUsage = 2

// exitInterrupted is the exit code after SIGINT or SIGTERM: 128 + SIGINT, as
// shells report a process killed by Ctrl-C.
const exitInterrupted = 130

// interruptGrace is how long a command may take to return after a signal
// before the process gives up on it and exits.
const interruptGrace = 500 * time.Millisecond

// shutdownGrace is interruptGrace for a daemon (a command annotated
// annotationDaemon): it stops its children and saves its state on a signal,
// then returns; a daemon that returns nil after a signal exits 0.
const shutdownGrace = 60 * time.Second

// annotationDaemon marks a command that runs until a signal and shuts down
// gracefully on it.
const annotationDaemon = "nodekeeper/daemon"

// usageError marks an error caused by the user's command line or input files: it is
// printed as one line and the process exits with exitUsage, as does an error of
// class decode.ErrBadInput.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// badInput wraps err as a usage error.
func badInput(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err: err}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	root := newRootCmd(logger)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return execute(ctx, root, graceFor(root, args), stderr)
}

// graceFor is how long the command args select may take to return after a
// signal: shutdownGrace for a daemon, interruptGrace for the others.
func graceFor(root *cobra.Command, args []string) time.Duration {
	if cmd, _, err := root.Find(args); err == nil && cmd.Annotations[annotationDaemon] != "" {
		return shutdownGrace
	}
	return interruptGrace
}

// execute runs root and returns the process exit code, printing an error on
// stderr as one line. After a signal the command has grace to return.
func execute(ctx context.Context, root *cobra.Command, grace time.Duration, stderr io.Writer) int {
	// The command runs in its own goroutine, so that a signal stops the
	// process even while the command blocks (a FIFO without a writer) or
	// parses a large file without looking at ctx. A command that does honour
	// ctx gets the grace to return, and print what it has, first.
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case err = <-done:
		case <-time.After(grace):
			err = ctx.Err()
		}
	}
	if err == nil {
		return 0 // a daemon that shut down cleanly after a signal, too
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "nodekeeper: interrupted")
		return exitInterrupted
	}
	// exec: the command's own exit code, which said its own error.
	var ec exitCodeError
	if errors.As(err, &ec) {
		return ec.code
	}
	// Input echoed in a message is escaped: no raw bytes reach the terminal.
	fmt.Fprintf(stderr, "nodekeeper: %s\n", decode.Escape(err.Error()))
	// Bad input is a usage error wherever it was not marked one: an input
	// file too large or malformed (decode.ErrBadInput) exits 2 like the rest.
	var ue usageError
	if errors.As(err, &ue) || isFlagError(err) || errors.Is(err, decode.ErrBadInput) {
		return exitUsage
	}
	return 1
}

// isFlagError reports whether err came from cobra's argument or flag parsing.
// cobra returns those before any RunE runs; we mark them in the FlagErrorFunc.
func isFlagError(err error) bool {
	var fe flagError
	return errors.As(err, &fe)
}

type flagError struct{ error }

func (e flagError) Unwrap() error { return e.error }

func newRootCmd(logger *slog.Logger) *cobra.Command {
	root := &cobra.Command{
		Use:           "nodekeeper [--version] [--max-input-size SIZE] COMMAND",
		Short:         "A node agent for the kubelet's node-level resource management",
		SilenceUsage:  true,
		SilenceErrors: true,
		// Runnable, so that cobra checks the arguments: an unknown command
		// is a usage error, not the help page with exit 0.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return flagError{err} })
	// --version is declared here, without cobra's -v shorthand, which would
	// mean something else than simulate's -v (verbose).
	root.Version = versionString()
	root.SetVersionTemplate("nodekeeper {{.Version}}\n")
	root.Flags().Bool("version", false, "print the version and exit")
	registerMaxInputSize(root)
	root.AddCommand(newVersionCmd(), newRunCmd(), newExplainCmd(logger), newSimulateCmd(logger), newGetCmd(), newApplyCmd(), newDeleteCmd(), newStopRuntimeCmd())
	root.AddCommand(newDescribeCmd(), newEventsCmd())
	root.AddCommand(newLogsCmd(), newExecCmd(), newKubeconfigCmd())
	markArgErrors(root)
	return root
}

// markArgErrors wraps every command's positional-argument validator so that its
// errors count as usage errors.
func markArgErrors(c *cobra.Command) {
	if c.Args != nil {
		orig := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := orig(cmd, args); err != nil {
				return flagError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		markArgErrors(sub)
	}
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the nodekeeper version and VCS revision",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "nodekeeper %s\n", versionString())
			return err
		},
	}
}

// versionString describes this binary: the version set at link time, else the
// module version from the build information, and the VCS revision the binary
// was built from.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return formatVersion(version, bi)
}

// formatVersion returns "VERSION (revision REV[, modified])". linked, when not
// empty, is the version given at link time and wins over the module version.
// A binary built outside a VCS checkout or with -buildvcs=false (as go test and
// GOFLAGS=-buildvcs=false do) has no revision: it reads "revision unknown".
// bi may be nil (a binary without build information).
func formatVersion(linked string, bi *debug.BuildInfo) string {
	v := linked
	if v == "" && bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if v == "" {
		v = "devel"
	}
	var rev string
	var modified bool
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if rev == "" {
		return v + " (revision unknown)"
	}
	rev = "revision " + rev
	if modified {
		rev += ", modified"
	}
	return v + " (" + rev + ")"
}

// newExplainCmd groups the explain subcommands: each replays one subsystem's
// decision code on a snapshot taken from a real node.
func newExplainCmd(logger *slog.Logger) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Replay nodekeeper's decisions on a snapshot from a real node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return badInput(errors.New("explain needs a subcommand; see nodekeeper explain --help"))
		},
	}
	// Each explain subcommand lives in its own file: explain_<name>.go.
	cmd.AddCommand(newExplainOOMCmd())
	cmd.AddCommand(newExplainEvictionCmd())
	cmd.AddCommand(newExplainPreemptionCmd())
	cmd.AddCommand(newExplainImageGCCmd())
	_ = logger
	return cmd
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// explainCommand returns an explain subcommand: it takes no arguments, has the -o
// flag out, and runs run with the command's context and output streams. The
// caller registers the command's other flags.
func explainCommand(out *outputFlag, use, short, long string, run func(ctx context.Context, stdout, stderr io.Writer) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	out.register(cmd)
	return cmd
}

// outputFlag is the -o flag shared by the explain commands: "table" (default) or "json".
type outputFlag struct{ format string }

func (o *outputFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "table", "output format: table or json")
}

// validate reports a usage error for an unknown format.
func (o *outputFlag) validate() error {
	switch o.format {
	case "table", "json":
		return nil
	}
	return badInput(fmt.Errorf("--output: unknown format %q (want table or json)", o.format))
}

func (o *outputFlag) json() bool { return o.format == "json" }

// writeJSON writes v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

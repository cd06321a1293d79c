package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

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

// binaryUnits are the units of humanBytes, each 1024 times the one before.
var binaryUnits = []string{"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}

// humanBytes renders a byte amount for a table, by one rule for every column:
// binary units with one decimal, in the largest unit in which the amount is at
// least 1 (Ki at least), so 80.0Mi, 7.9Gi, 100.0Gi, 0.5Ki; 0 is "0". The JSON
// outputs keep exact Kubernetes quantities instead.
func humanBytes(v int64) string {
	if v == 0 {
		return "0"
	}
	sign := ""
	a := uint64(v)
	if v < 0 {
		sign, a = "-", uint64(^v)+1
	}
	f := float64(a) / 1024
	i := 0
	for f >= 1024 && i < len(binaryUnits)-1 {
		f /= 1024
		i++
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	if s == "1024.0" && i < len(binaryUnits)-1 { // 1023.96Mi rounds up to 1.0Gi
		s, i = "1.0", i+1
	}
	return sign + s + binaryUnits[i]
}

// humanAmount renders an amount for a table: bytes by humanBytes, counts (inodes,
// processes) as plain integers.
func humanAmount(v int64, count bool) string {
	if count {
		return strconv.FormatInt(v, 10)
	}
	return humanBytes(v)
}

package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

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

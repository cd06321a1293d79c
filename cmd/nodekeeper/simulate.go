package main

import (
	"bytes"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/internal/offline/simulate"
)

func newSimulateCmd(logger *slog.Logger) *cobra.Command {
	var format string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "simulate FILE [-o text|json] [-v]",
		Short: "Replay a scripted node history through the real managers on a virtual clock",
		Long: `Runs the eviction manager, image and container GC, the admission chain and
critical-pod preemption against the scenario in FILE (YAML or JSON) on a virtual
clock and prints every decision with its time. See docs/simulate.md for the format.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return badInput(fmt.Errorf("--output: unknown format %q (want text or json)", format))
			}
			data, err := readInput(cmd.Context(), args[0])
			if err != nil {
				return badInput(err)
			}
			sc, err := simulate.Parse(args[0], data)
			if err != nil {
				return badInput(err)
			}
			for _, w := range sc.Config.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", decode.Escape(w))
			}
			log := slog.New(slog.DiscardHandler)
			if verbose {
				log = logger
			}
			// Each batch goes out as soon as the simulator has it, in one
			// write: an interrupted run has printed what it computed.
			write := simulate.WriteText
			if format == "json" {
				write = simulate.WriteJSON
			}
			out := cmd.OutOrStdout()
			var buf bytes.Buffer
			n := 0
			err = simulate.Stream(cmd.Context(), sc, log, func(batch []simulate.Event) error {
				buf.Reset()
				n += len(batch)
				if err := write(&buf, batch); err != nil {
					return err
				}
				_, err := out.Write(buf.Bytes())
				return err
			})
			if err != nil {
				return err
			}
			if n == 0 && format == "text" {
				_, err := fmt.Fprintln(out, "no decisions")
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "text", "output format: text or json (one object per line)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also log the managers' own messages to stderr, stamped with the virtual time")
	return cmd
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
)

func newGetNodeCmd() *cobra.Command {
	var server string
	cmd := &cobra.Command{
		Use:   "node [--server URL]",
		Short: "Show the node's conditions, capacity and allocatable, as kubectl describe node does",
		Long: `Reads SERVER/node, the v1 Node a running 'nodekeeper run' serves, and prints
its readiness, its conditions (MemoryPressure, DiskPressure, PIDPressure,
Ready: status, reason, message, time since the last transition) and each
resource's capacity and allocatable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !isURL(server) {
				return flagError{fmt.Errorf("--server %q: want an http:// or https:// URL", server)}
			}
			node, err := fetchNode(cmd.Context(), strings.TrimSuffix(server, "/")+"/node")
			if errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("%w (is 'nodekeeper run' serving there? see --server)", err)
			}
			if err != nil {
				return err
			}
			return printNode(cmd.OutOrStdout(), node, time.Now())
		},
	}
	cmd.Flags().StringVar(&server, "server", defaultServer, "base URL of the running nodekeeper")
	return cmd
}

// fetchNode reads the Node at url, under --max-input-size.
func fetchNode(ctx context.Context, url string) (*v1.Node, error) {
	limit, _ := ctx.Value(maxInputSizeKey{}).(int64)
	data, err := readURL(ctx, url, limit, urlTimeout)
	if err != nil {
		return nil, err
	}
	var n v1.Node
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("%s: not a Node: %w", url, err)
	}
	if n.Kind != "Node" {
		return nil, fmt.Errorf("%s: field kind: %q, want Node", url, n.Kind)
	}
	return &n, nil
}

// printNode writes the node's status, its conditions and its resources.
func printNode(w io.Writer, n *v1.Node, now time.Time) error {
	status := "NotReady"
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
			status = "Ready"
		}
	}
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	fmt.Fprintf(tw, "NAME\tSTATUS\n%s\t%s\n\n", n.Name, status)
	fmt.Fprintln(tw, "CONDITION\tSTATUS\tREASON\tSINCE\tMESSAGE")
	for _, c := range n.Status.Conditions {
		age := "<unknown>"
		if !c.LastTransitionTime.IsZero() {
			age = since(c.LastTransitionTime.Time, now)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, age, c.Message)
	}
	fmt.Fprintln(tw, "\nRESOURCE\tCAPACITY\tALLOCATABLE")
	var names []string
	for r := range n.Status.Capacity {
		names = append(names, string(r))
	}
	for r := range n.Status.Allocatable {
		if _, ok := n.Status.Capacity[r]; !ok {
			names = append(names, string(r))
		}
	}
	slices.Sort(names)
	for _, r := range names {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r, quantityOr(n.Status.Capacity, r), quantityOr(n.Status.Allocatable, r))
	}
	return tw.Flush()
}

func quantityOr(l v1.ResourceList, r string) string {
	q, ok := l[v1.ResourceName(r)]
	if !ok {
		return "<none>"
	}
	return q.String()
}

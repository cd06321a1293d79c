package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
)

func newGetNodeCmd() *cobra.Command {
	var at agentTarget
	cmd := &cobra.Command{
		Use:   "node [--root-dir DIR | --socket PATH | --server URL]",
		Short: "Show the node's conditions, capacity and allocatable, as kubectl describe node does",
		Long: `Reads /node, the v1 Node a running 'nodekeeper run' serves, through its unix
socket ROOT_DIR/nodekeeper.sock (root only; default ` + defaultSocket + `)
or from a read-only port (--server URL, when readOnlyPort is set), and
prints its readiness, its conditions (MemoryPressure, DiskPressure,
PIDPressure, Ready: status, reason, message, time since the last
transition) and each resource's capacity and allocatable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, base, sock, err := at.client(cmd)
			if err != nil {
				return err
			}
			node, err := fetchNode(cmd.Context(), c, base, sock)
			if err != nil {
				return err
			}
			return printNode(cmd.OutOrStdout(), node, time.Now())
		},
	}
	at.flags(cmd, false)
	return cmd
}

// fetchNode reads the agent's Node, under --max-input-size.
func fetchNode(ctx context.Context, c *http.Client, base, sock string) (*v1.Node, error) {
	data, name, err := readAgent(ctx, c, base, sock, "/node")
	if err != nil {
		return nil, err
	}
	var n v1.Node
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("%s: not a Node: %w", name, err)
	}
	if n.Kind != "Node" {
		return nil, fmt.Errorf("%s: field kind: %q, want Node", name, n.Kind)
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

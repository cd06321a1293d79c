package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
)

func newEventsCmd() *cobra.Command {
	var (
		at        agentTarget
		namespace string
		forObject string
	)
	cmd := &cobra.Command{
		Use:   "events [--for KIND/NAME] [-n NAMESPACE] [--root-dir DIR | --socket PATH]",
		Short: "List the events a standalone nodekeeper recorded, as kubectl events does",
		Long: `Reads /events from a running standalone 'nodekeeper run' through its unix
socket ROOT_DIR/nodekeeper.sock (root only; default ` + defaultSocket + `): the
last 1000 events it recorded, as it would write them to an API server (a
repeat counted on the first one), and prints kubectl events' table, oldest
first: LAST SEEN (with "(xN over AGE)" for a repeat), TYPE, REASON, OBJECT
(Kind/name) and MESSAGE, with NAMESPACE first unless -n is given. --for
pod/NAME (or node/NAME) shows one object's events, in namespace -n (default
"default"). In a cluster the events are the API server's: use kubectl events.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kind, name, err := parseFor(forObject)
			if err != nil {
				return err
			}
			c, base, sock, err := at.socketClient(cmd)
			if err != nil {
				return err
			}
			list, err := fetchEvents(cmd.Context(), c, base, sock)
			if err != nil {
				return err
			}
			ns := namespace
			if name != "" && ns == "" && kind != "node" {
				ns = v1.NamespaceDefault
			}
			var out []v1.Event
			for _, e := range list {
				if (ns == "" || e.Namespace == ns) && (name == "" || strings.EqualFold(e.InvolvedObject.Kind, kind) && e.InvolvedObject.Name == name) {
					out = append(out, e)
				}
			}
			switch {
			case len(out) > 0:
				return printEvents(cmd.OutOrStdout(), out, ns == "", time.Now())
			case ns == "":
				fmt.Fprintln(cmd.ErrOrStderr(), "No events found.")
			default:
				fmt.Fprintf(cmd.ErrOrStderr(), "No events found in %s namespace.\n", ns)
			}
			return nil
		},
	}
	at.flags(cmd, false)
	_ = cmd.Flags().MarkHidden("server") // the read-only port serves no events
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "only this namespace's events (with --for, default \"default\")")
	cmd.Flags().StringVar(&forObject, "for", "", "only the events of this object: pod/NAME or node/NAME")
	return cmd
}

// socketClient is client for the commands that read what only the socket
// serves (/events): --server, hidden, is a usage error.
func (a *agentTarget) socketClient(cmd *cobra.Command) (*http.Client, string, string, error) {
	if cmd.Flags().Changed("server") {
		return nil, "", "", flagError{errors.New("--server: a read-only port serves no events: use --root-dir or --socket")}
	}
	return a.client(cmd)
}

// parseFor reads --for KIND/NAME: kind lower-cased, pod or node; empty for
// none. Anything else is a usage error.
func parseFor(s string) (kind, name string, err error) {
	if s == "" {
		return "", "", nil
	}
	kind, name, ok := strings.Cut(s, "/")
	kind = strings.ToLower(kind)
	switch kind {
	case "po", "pods":
		kind = "pod"
	case "no", "nodes":
		kind = "node"
	}
	if !ok || name == "" || (kind != "pod" && kind != "node") {
		return "", "", badInput(fmt.Errorf("--for %q: want pod/NAME or node/NAME", s))
	}
	return kind, name, nil
}

// errNoEvents is fetchEvents' error for an agent that keeps no events (one
// in a cluster: they are the API server's).
var errNoEvents = errors.New("the agent keeps no events: in a cluster they are the API server's, see kubectl events")

// fetchEvents reads the agent's EventList, under --max-input-size. An agent
// that serves none is an error of class errNoEvents.
func fetchEvents(ctx context.Context, c *http.Client, base, sock string) ([]v1.Event, error) {
	data, name, err := readAgent(ctx, c, base, sock, "/events")
	if err != nil {
		if se := (*statusError)(nil); errors.As(err, &se) && se.code == http.StatusNotFound {
			return nil, fmt.Errorf("%w (%w)", err, errNoEvents)
		}
		return nil, err
	}
	var list v1.EventList
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", name, errors.Join(decode.ErrBadInput, err))
	}
	return list.Items, nil
}

// printEvents writes events as kubectl events does, oldest first, with the
// namespace column when namespaces is set, times relative to now.
func printEvents(w io.Writer, events []v1.Event, namespaces bool, now time.Time) error {
	sortEvents(events)
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	if namespaces {
		fmt.Fprint(tw, "NAMESPACE\t")
	}
	fmt.Fprintln(tw, "LAST SEEN\tTYPE\tREASON\tOBJECT\tMESSAGE")
	for _, e := range events {
		if namespaces {
			fmt.Fprintf(tw, "%s\t", e.Namespace)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%s\n", eventInterval(&e, now), e.Type, e.Reason,
			e.InvolvedObject.Kind, e.InvolvedObject.Name, strings.TrimSpace(e.Message))
	}
	return tw.Flush()
}

// eventLast is when an event was last seen (kubectl sorts by it).
func eventLast(e *v1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.EventTime.Time
}

// sortEvents orders events by when they were last seen, oldest first.
func sortEvents(events []v1.Event) {
	sort.SliceStable(events, func(i, j int) bool { return eventLast(&events[i]).Before(eventLast(&events[j])) })
}

// eventInterval is kubectl's LAST SEEN (describe's Age): the time since the
// event, and for a repeat "(xN over AGE)" with the time since the first.
func eventInterval(e *v1.Event, now time.Time) string {
	ago := func(t time.Time) string {
		if t.IsZero() {
			return "<unknown>"
		}
		return since(t, now)
	}
	first := ago(e.EventTime.Time)
	if e.EventTime.IsZero() {
		first = ago(e.FirstTimestamp.Time)
	}
	switch {
	case e.Series != nil:
		return fmt.Sprintf("%s (x%d over %s)", ago(e.Series.LastObservedTime.Time), e.Series.Count, first)
	case e.Count > 1:
		return fmt.Sprintf("%s (x%d over %s)", ago(e.LastTimestamp.Time), e.Count, first)
	}
	return first
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/nodekeeper/nodekeeper/internal/offline/snapshot"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

func newGetCmd() *cobra.Command {
	get := &cobra.Command{
		Use:   "get RESOURCE",
		Short: "Show what a running nodekeeper reports (RESOURCE: pods, node)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var at agentTarget
	pods := &cobra.Command{
		Use:   "pods [--root-dir DIR | --socket PATH | --server URL]",
		Short: "List the pods of a running nodekeeper, as kubectl get pods does",
		Long: `Reads /pods, the PodList a running 'nodekeeper run' serves (as the
kubelet's read-only /pods), through its unix socket ROOT_DIR/nodekeeper.sock
(root only; default ` + defaultSocket + `) or from a read-only port
(--server URL, when readOnlyPort is set), and prints one line per pod:
namespace, name, phase, pod IP, ready containers out of all, restarts (with
the time since the last one) and age.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, base, sock, err := at.client(cmd)
			if err != nil {
				return err
			}
			list, err := fetchPods(cmd.Context(), c, base, sock)
			if err != nil {
				return err
			}
			return printPodTable(cmd.OutOrStdout(), list, time.Now())
		},
	}
	at.flags(pods, false)
	get.AddCommand(pods, newGetNodeCmd())
	return get
}

// fetchPods reads the agent's PodList, under --max-input-size.
func fetchPods(ctx context.Context, c *http.Client, base, sock string) ([]v1.Pod, error) {
	data, name, err := readAgent(ctx, c, base, sock, "/pods")
	if err != nil {
		return nil, err
	}
	pods, err := snapshot.ParsePods(name, data)
	if err != nil {
		return nil, err
	}
	out := make([]v1.Pod, len(pods))
	for i, p := range pods {
		out[i] = *p
	}
	return out, nil
}

// printPodTable writes pods as a table, sorted by namespace and name, with
// ages and restart times relative to now.
func printPodTable(w io.Writer, pods []v1.Pod, now time.Time) error {
	sorted := make([]*v1.Pod, len(pods))
	for i := range pods {
		sorted[i] = &pods[i]
	}
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tPHASE\tIP\tREADY\tRESTARTS\tAGE")
	for _, p := range sorted {
		phase := string(p.Status.Phase)
		if phase == "" {
			phase = "Unknown"
		}
		if p.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		ip := p.Status.PodIP
		if ip == "" {
			ip = "<none>"
		}
		ready, total, restarts, last := containerCounts(p)
		restartText := strconv.Itoa(int(restarts))
		if !last.IsZero() {
			restartText += " (" + since(last, now) + " ago)"
		}
		age := "<unknown>"
		if !p.CreationTimestamp.IsZero() {
			age = since(p.CreationTimestamp.Time, now)
		} else if p.Status.StartTime != nil {
			age = since(p.Status.StartTime.Time, now)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", p.Namespace, p.Name, phase, ip, ready, total, restartText, age)
	}
	return tw.Flush()
}

// containerCounts counts a pod's regular and sidecar (restartable init)
// containers, those ready, their restarts and the latest time one of them
// last terminated.
func containerCounts(p *v1.Pod) (ready, total int, restarts int32, last time.Time) {
	sidecars := map[string]bool{}
	for i := range p.Spec.InitContainers {
		if c := &p.Spec.InitContainers[i]; nodeapi.IsSidecar(c) {
			sidecars[c.Name] = true
		}
	}
	total = len(p.Spec.Containers) + len(sidecars)
	count := func(st v1.ContainerStatus) {
		if st.Ready {
			ready++
		}
		restarts += st.RestartCount
		if t := st.LastTerminationState.Terminated; t != nil && t.FinishedAt.After(last) {
			last = t.FinishedAt.Time
		}
	}
	for _, st := range p.Status.InitContainerStatuses {
		if sidecars[st.Name] {
			count(st)
		}
	}
	for _, st := range p.Status.ContainerStatuses {
		count(st)
	}
	return ready, total, restarts, last
}

// since is the time from t to now as kubectl prints ages ("5m30s", "3d").
func since(t, now time.Time) string {
	return duration.HumanDuration(now.Sub(t))
}

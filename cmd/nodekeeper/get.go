package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/nodekeeper/nodekeeper/internal/snapshot"
)

// defaultServer is where `get` finds a running agent: the kubelet's
// read-only port on the loopback.
const defaultServer = "http://127.0.0.1:10255"

func newGetCmd() *cobra.Command {
	get := &cobra.Command{
		Use:   "get RESOURCE",
		Short: "Show what a running nodekeeper reports (RESOURCE: pods, node)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var server string
	pods := &cobra.Command{
		Use:   "pods [--server URL]",
		Short: "List the pods of a running nodekeeper, as kubectl get pods does",
		Long: `Reads SERVER/pods, the PodList a running 'nodekeeper run' serves (as the
kubelet's read-only /pods), and prints one line per pod: namespace, name,
phase, pod IP, ready containers out of all, restarts (with the time since the
last one) and age.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !isURL(server) {
				return flagError{fmt.Errorf("--server %q: want an http:// or https:// URL", server)}
			}
			list, err := fetchPods(cmd.Context(), strings.TrimSuffix(server, "/")+"/pods")
			if errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("%w (is 'nodekeeper run' serving there? see --server)", err)
			}
			if err != nil {
				return err
			}
			return printPodTable(cmd.OutOrStdout(), list, time.Now())
		},
	}
	pods.Flags().StringVar(&server, "server", defaultServer, "base URL of the running nodekeeper")
	get.AddCommand(pods, newGetNodeCmd())
	return get
}

// fetchPods reads the PodList at url, under --max-input-size.
func fetchPods(ctx context.Context, url string) ([]v1.Pod, error) {
	limit, _ := ctx.Value(maxInputSizeKey{}).(int64)
	data, err := readURL(ctx, url, limit, urlTimeout)
	if err != nil {
		return nil, err
	}
	pods, err := snapshot.ParsePods(url, data)
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
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
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

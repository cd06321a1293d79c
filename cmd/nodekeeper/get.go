package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	"github.com/nodekeeper/nodekeeper/internal/offline/snapshot"
)

func newGetCmd() *cobra.Command {
	get := &cobra.Command{
		Use:   "get RESOURCE",
		Short: "Show what a running nodekeeper reports (RESOURCE: pods, node)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var (
		at        agentTarget
		namespace string
		output    string
		watch     bool
	)
	pods := &cobra.Command{
		Use:     "pods [NAME] [-n NAMESPACE] [-o wide|json|yaml|name|jsonpath=TEMPLATE] [-w] [--root-dir DIR | --socket PATH | --server URL]",
		Aliases: []string{"pod", "po"},
		Short:   "List the pods of a running nodekeeper, as kubectl get pods does",
		Long: `Reads /pods, the PodList a running 'nodekeeper run' serves (as the
kubelet's read-only /pods), through its unix socket ROOT_DIR/nodekeeper.sock
(root only; default ` + defaultSocket + `) or from a read-only port
(--server URL, when readOnlyPort is set), and prints kubectl's table: the
namespace (when listing every namespace), name, ready containers out of all,
STATUS as kubectl computes it (ContainerCreating, ErrImagePull,
ImagePullBackOff, CrashLoopBackOff, Init:N/M, PodInitializing, Completed,
Error, OOMKilled, Evicted, Terminating...), restarts (with the time since the
last one) and age; -o wide adds IP, NODE, NOMINATED NODE and READINESS GATES.
-o json|yaml prints the Pod (with NAME) or a List, as kubectl does; -o name
prints pod/NAME lines; -o jsonpath=TEMPLATE prints kubectl's JSONPath template
over the same object (-o jsonpath='{.status.podIP}' with NAME). NAME
shows one pod (namespace -n, default "default"; an unknown pod exits 1);
-n alone lists that namespace's pods. -w prints the table, then a line for
each pod that changes (polling every second) until Ctrl-C (exit 0).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := parsePodFormat(output)
			if err != nil {
				return err
			}
			c, base, sock, err := at.client(cmd)
			if err != nil {
				return err
			}
			q := podQuery{namespace: namespace}
			if len(args) == 1 {
				q.name = args[0]
				if q.namespace == "" {
					q.namespace = v1.NamespaceDefault
				}
			}
			f.namespaces = q.namespace == ""
			read := func(ctx context.Context) ([]v1.Pod, error) {
				list, err := fetchPods(ctx, c, base, sock)
				return q.filter(list), err
			}
			list, err := read(cmd.Context())
			if err != nil {
				return err
			}
			if q.name != "" && len(list) == 0 {
				return fmt.Errorf("pod %q not found in namespace %q (nodekeeper get pods lists them)", q.name, q.namespace)
			}
			if err := f.print(cmd.OutOrStdout(), list, q.name != "", true, time.Now()); err != nil || !watch {
				return err
			}
			return watchPods(cmd.Context(), cmd.OutOrStdout(), f, list, read, time.Second)
		},
	}
	at.flags(pods, false)
	pods.Flags().StringVarP(&namespace, "namespace", "n", "", "only this namespace's pods (with NAME, default \"default\")")
	pods.Flags().StringVarP(&output, "output", "o", "", "output format: wide, json, yaml, name or jsonpath=TEMPLATE (default: the table)")
	pods.Flags().BoolVarP(&watch, "watch", "w", false, "after the table, print each change until Ctrl-C")
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

// podQuery selects pods: one by namespace and name, a namespace's, or all.
type podQuery struct{ namespace, name string }

// filter returns the pods q selects.
func (q podQuery) filter(pods []v1.Pod) []v1.Pod {
	var out []v1.Pod
	for _, p := range pods {
		if (q.namespace == "" || p.Namespace == q.namespace) && (q.name == "" || p.Name == q.name) {
			out = append(out, p)
		}
	}
	return out
}

// podFormat is how get pods prints: kubectl's table, wide or not, or the
// objects as JSON or YAML.
type podFormat struct {
	wide, json, yaml bool
	// name prints pod/NAME per pod (-o name).
	name bool
	// jsonPath, when set, prints each answer through this template (-o
	// jsonpath=TEMPLATE), as kubectl does: over the pod when NAME is given,
	// else over the List; a key a pod lacks prints nothing.
	jsonPath *jsonpath.JSONPath
	// namespaces adds the NAMESPACE column (pods of every namespace).
	namespaces bool
}

// parsePodFormat reads -o; an unknown format is a usage error.
func parsePodFormat(o string) (podFormat, error) {
	switch o {
	case "":
		return podFormat{}, nil
	case "wide":
		return podFormat{wide: true}, nil
	case "json":
		return podFormat{json: true}, nil
	case "yaml":
		return podFormat{yaml: true}, nil
	case "name":
		return podFormat{name: true}, nil
	}
	if tmpl, ok := strings.CutPrefix(o, "jsonpath="); ok {
		jp := jsonpath.New("output").AllowMissingKeys(true)
		if err := jp.Parse(tmpl); err != nil {
			return podFormat{}, badInput(fmt.Errorf("--output %q: bad jsonpath template: %w", o, err))
		}
		return podFormat{jsonPath: jp}, nil
	}
	return podFormat{}, badInput(fmt.Errorf("--output %q: unknown format (want wide, json, yaml, name or jsonpath=TEMPLATE)", o))
}

// print writes pods: the table (with its header when header is set), or,
// as JSON or YAML, the pod when one is set, else a List of them, as
// kubectl prints them (apiVersion and kind set).
func (f podFormat) print(w io.Writer, pods []v1.Pod, one, header bool, now time.Time) error {
	if f.name {
		for _, p := range pods {
			if _, err := fmt.Fprintf(w, "pod/%s\n", p.Name); err != nil {
				return err
			}
		}
		return nil
	}
	if !f.json && !f.yaml && f.jsonPath == nil {
		return writePodTable(w, pods, f, header, now)
	}
	items := make([]v1.Pod, len(pods))
	for i, p := range pods {
		p.APIVersion, p.Kind = "v1", "Pod"
		items[i] = p
	}
	var obj any = &podList{APIVersion: "v1", Kind: "List", Items: items}
	if one && len(items) == 1 {
		obj = &items[0]
	}
	if f.jsonPath != nil {
		return printJSONPath(w, f.jsonPath, obj)
	}
	if f.yaml {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "    ") // kubectl's indentation
	return enc.Encode(obj)
}

// printJSONPath writes obj through jp as kubectl's -o jsonpath does: over
// obj's JSON form (so the template names JSON fields, .status.podIP).
func printJSONPath(w io.Writer, jp *jsonpath.JSONPath, obj any) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	var generic any
	if err := json.Unmarshal(data, &generic); err != nil {
		return err
	}
	return jp.Execute(w, generic)
}

// podList is kubectl's -o json|yaml of several objects: a v1 List.
type podList struct {
	APIVersion string   `json:"apiVersion"`
	Items      []v1.Pod `json:"items"`
	Kind       string   `json:"kind"`
	Metadata   struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

// printPodTable writes every namespace's pods as kubectl's table (the one
// 'run' prints as the pods change).
func printPodTable(w io.Writer, pods []v1.Pod, now time.Time) error {
	return writePodTable(w, pods, podFormat{namespaces: true}, true, now)
}

// writePodTable writes pods as kubectl get pods does, sorted by namespace
// and name, with ages and restart times relative to now.
func writePodTable(w io.Writer, pods []v1.Pod, f podFormat, header bool, now time.Time) error {
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
	if header {
		cols := []string{"NAME", "READY", "STATUS", "RESTARTS", "AGE"}
		if f.namespaces {
			cols = append([]string{"NAMESPACE"}, cols...)
		}
		if f.wide {
			cols = append(cols, "IP", "NODE", "NOMINATED NODE", "READINESS GATES")
		}
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	for _, p := range sorted {
		fmt.Fprintln(tw, strings.Join(podRow(p, f, now), "\t"))
	}
	return tw.Flush()
}

// podRow is p's row of the table.
func podRow(p *v1.Pod, f podFormat, now time.Time) []string {
	s := summarizePod(p)
	age := "<unknown>"
	if !p.CreationTimestamp.IsZero() {
		age = since(p.CreationTimestamp.Time, now)
	} else if p.Status.StartTime != nil {
		age = since(p.Status.StartTime.Time, now)
	}
	row := []string{p.Name, strconv.Itoa(s.Ready) + "/" + strconv.Itoa(s.Total), s.Status, s.restartsText(now), age}
	if f.namespaces {
		row = append([]string{p.Namespace}, row...)
	}
	if f.wide {
		row = append(row, orNone(podIP(p)), orNone(p.Spec.NodeName), orNone(p.Status.NominatedNodeName), readinessGates(p))
	}
	return row
}

// podIP is the pod's first IP.
func podIP(p *v1.Pod) string {
	if len(p.Status.PodIPs) > 0 {
		return p.Status.PodIPs[0].IP
	}
	return p.Status.PodIP
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// readinessGates is READINESS GATES: the gates whose condition is True out
// of all, or <none>.
func readinessGates(p *v1.Pod) string {
	if len(p.Spec.ReadinessGates) == 0 {
		return "<none>"
	}
	n := 0
	for _, g := range p.Spec.ReadinessGates {
		if podCondition(p, g.ConditionType) {
			n++
		}
	}
	return fmt.Sprintf("%d/%d", n, len(p.Spec.ReadinessGates))
}

// podKey sums up what p's row shows but the times that pass (age, time
// since the last restart): a watch prints a row when it changes.
func podKey(p *v1.Pod) string {
	s := summarizePod(p)
	return fmt.Sprintf("%s/%s %d/%d %s %d %s %s %s %s", p.Namespace, p.Name, s.Ready, s.Total, s.Status, s.Restarts,
		podIP(p), p.Spec.NodeName, p.Status.NominatedNodeName, readinessGates(p))
}

// watchPods polls read every interval and prints, in format f, each pod
// whose row changed since the last print (last is what was printed first),
// new pods included, until ctx ends; then it returns nil, as Ctrl-C ends a
// watch. A pod that disappears is printed once more, as last seen.
func watchPods(ctx context.Context, w io.Writer, f podFormat, last []v1.Pod, read func(context.Context) ([]v1.Pod, error), interval time.Duration) error {
	type entry struct {
		key string
		pod v1.Pod
	}
	seen := map[types.UID]entry{}
	for _, p := range last {
		seen[p.UID] = entry{podKey(&p), p}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pods, err := read(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		var changed []v1.Pod
		present := map[types.UID]bool{}
		for _, p := range pods {
			present[p.UID] = true
			if k := podKey(&p); seen[p.UID].key != k {
				seen[p.UID] = entry{k, p}
				changed = append(changed, p)
			}
		}
		for uid, e := range seen {
			if !present[uid] {
				delete(seen, uid)
				changed = append(changed, e.pod)
			}
		}
		for _, p := range changed {
			if err := f.print(w, []v1.Pod{p}, true, false, time.Now()); err != nil {
				return err
			}
		}
	}
}

// since is the time from t to now as kubectl prints ages ("5m30s", "3d").
func since(t, now time.Time) string {
	return duration.HumanDuration(now.Sub(t))
}

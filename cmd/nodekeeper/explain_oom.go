package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
	"github.com/nodekeeper/nodekeeper/qos"
)

// newExplainOOMCmd returns the explain oom command: it prints the QoS class and
// oom_score_adj of every container of every pod in a snapshot.
func newExplainOOMCmd() *cobra.Command {
	var o explainOOMOpts
	cmd := explainCommand(&o.out,
		"oom --pods FILE --memory-capacity QTY [-o table|json]",
		"Show the QoS class and oom_score_adj of every container",
		`Computes, for every init (including sidecar) and regular container of every pod in
PODS (as 'kubectl get pods -o json|yaml' prints them), the QoS class and the
oom_score_adj the kubelet gives it on a node with the given memory capacity (the
node's status.capacity.memory, e.g. 30Gi). Rows follow the file's pod order and,
within a pod, init containers before regular ones.

Guaranteed and node-critical pods get -997, BestEffort pods 1000, and Burstable
containers 1000 - 1000*request/capacity, kept within 3..999. REQUEST is the
container's memory request (its limit when no request is set); a pod-level memory
request not assigned to containers is shared among them on top of it.`,
		o.run)
	f := cmd.Flags()
	f.StringVar(&o.pods, "pods", "", "pods file (PodList, List or Pod stream; JSON or YAML)")
	f.StringVar(&o.capacity, "memory-capacity", "", "node memory capacity as a quantity, e.g. 30Gi")
	return cmd
}

// oomRow is one container's line. Its exported fields are the -o json schema,
// which is stable: namespace, name, container, qos, oomScoreAdj.
type oomRow struct {
	Namespace   string         `json:"namespace"`
	Name        string         `json:"name"`
	Container   string         `json:"container"`
	QOS         v1.PodQOSClass `json:"qos"`
	OOMScoreAdj int            `json:"oomScoreAdj"`

	request string // memory request for the table, "-" when none
}

// explainOOMOpts holds the flags of explain oom.
type explainOOMOpts struct {
	pods, capacity string
	out            outputFlag
}

func (o *explainOOMOpts) run(ctx context.Context, stdout, _ io.Writer) error {
	if err := o.out.validate(); err != nil {
		return err
	}
	if o.pods == "" {
		return badInput(errors.New("--pods: missing (want a pods file from kubectl get pods -o json)"))
	}
	capacity, err := parseMemoryCapacity(o.capacity)
	if err != nil {
		return badInput(err)
	}
	pods, err := loadPods(ctx, o.pods)
	if err != nil {
		return badInput(err)
	}
	rows := oomRows(pods, capacity)
	if o.out.json() {
		return writeJSON(stdout, rows)
	}
	return writeOOMTable(stdout, rows)
}

// parseMemoryCapacity parses the --memory-capacity value into bytes; it must be
// a positive quantity below 2^63-1 (the parser silently clamps larger binary-suffixed
// values such as 9Ei to exactly that, so it is rejected too).
func parseMemoryCapacity(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("--memory-capacity: missing (want the node's memory capacity, e.g. 30Gi)")
	}
	q, err := quantity.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("--memory-capacity %q: not a valid quantity (want e.g. 30Gi)", s)
	}
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("--memory-capacity %q: must be positive", s)
	}
	if !quantity.FitsInt64("memory", q) {
		return 0, fmt.Errorf("--memory-capacity %q: too large", s)
	}
	return q.Value(), nil
}

// oomRows scores every init and regular container of pods, in order.
func oomRows(pods []*v1.Pod, capacity int64) []oomRow {
	rows := []oomRow{} // encodes as [] rather than null
	for _, pod := range pods {
		class := qos.Class(pod)
		for _, ctrs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for i := range ctrs {
				c := &ctrs[i]
				rows = append(rows, oomRow{
					Namespace:   pod.Namespace,
					Name:        pod.Name,
					Container:   c.Name,
					QOS:         class,
					OOMScoreAdj: qos.OOMScoreAdj(pod, c, capacity),
					request:     memoryRequestText(c),
				})
			}
		}
	}
	return rows
}

// memoryRequestText returns c's memory request in the tables' byte unit, its
// memory limit when no request is set (the API server's default), or "-" for
// neither.
func memoryRequestText(c *v1.Container) string {
	if q, ok := c.Resources.Requests[v1.ResourceMemory]; ok {
		return humanBytes(q.Value())
	}
	if q, ok := c.Resources.Limits[v1.ResourceMemory]; ok {
		return humanBytes(q.Value())
	}
	return "-"
}

func writeOOMTable(w io.Writer, rows []oomRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE/NAME\tCONTAINER\tQOS\tREQUEST\tOOM_SCORE_ADJ")
	for _, r := range rows {
		name := r.Name
		if r.Namespace != "" {
			name = r.Namespace + "/" + r.Name
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", name, r.Container, r.QOS, r.request, r.OOMScoreAdj)
	}
	return tw.Flush()
}

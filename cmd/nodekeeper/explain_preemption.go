package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/preemption"
	"github.com/nodekeeper/nodekeeper/qos"
)

func newExplainPreemptionCmd() *cobra.Command {
	var o explainPreemptionOpts
	cmd := explainCommand(&o.out,
		"preemption --pods FILE --pod FILE (--allocatable LIST | [--config FILE] --capacity LIST) [--node NODE] [-o table|json]",
		"Show whether a pod would be admitted and which pods a critical pod would preempt",
		`Replays the admission of one new pod on a snapshot: the node's running pods (--pods) and
the new pod (--pod), both as 'kubectl get pods -o json|yaml' prints them. Pods in phase
Succeeded or Failed are not active and are left out, as is the new pod if it is listed,
and so are pods bound to another node than --node (default: the new pod's
spec.nodeName); pods of several nodes without a node to pick are an error.

The node's allocatable resources are given either directly, with --allocatable, or as the
kubelet computes them: --capacity minus the kubeReserved, systemReserved and hard
memory.available / nodefs.available eviction thresholds of the KubeletConfiguration in
--config (the kubelet's defaults without --config). A LIST is NAME=QUANTITY,... for
example cpu=4,memory=16Gi,pods=110,nvidia.com/gpu=2; pods defaults to maxPods (`+strconv.Itoa(nodeapi.DefaultMaxPods)+`).

If the pod does not fit and is critical (a static or mirror pod, or priority >=
2000000000), the pods the kubelet would preempt are listed in the order it kills them.
Nothing is killed: this is a dry run of the same admission code nodekeeper runs.`,
		o.run)
	f := cmd.Flags()
	f.StringVar(&o.pods, "pods", "", "running pods file (PodList, List or Pod stream; JSON or YAML)")
	f.StringVar(&o.pod, "pod", "", "the new pod (one Pod; JSON or YAML)")
	f.StringVar(&o.node, "node", "", "the node admitting the pod (default: the new pod's spec.nodeName)")
	f.StringVar(&o.allocatable, "allocatable", "", "node allocatable resources, NAME=QUANTITY,...")
	f.StringVar(&o.config, "config", "", "KubeletConfiguration file for reservations (with --capacity)")
	f.StringVar(&o.capacity, "capacity", "", "node capacity, NAME=QUANTITY,... (allocatable is derived from it)")
	return cmd
}

type explainPreemptionOpts struct {
	pods, pod, node, allocatable, config, capacity string
	out                                            outputFlag
}

func (o *explainPreemptionOpts) run(ctx context.Context, stdout, stderr io.Writer) error {
	if err := o.out.validate(); err != nil {
		return err
	}
	if o.pod == "" {
		return badInput(errors.New("explain preemption: --pod is required"))
	}
	if o.pods == "" {
		return badInput(errors.New("explain preemption: --pods is required"))
	}
	alloc, err := o.nodeAllocatable(ctx, stderr)
	if err != nil {
		return err
	}
	newPod, err := loadPod(ctx, o.pod)
	if err != nil {
		return badInput(err)
	}
	running, err := loadPods(ctx, o.pods)
	if err != nil {
		return badInput(err)
	}
	node := cmp.Or(o.node, newPod.Spec.NodeName)
	if nodes := podNodes(running); node == "" && len(nodes) > 1 {
		return badInput(fmt.Errorf("%s: pods of %d nodes (%s); name the node with --node, or list one node's pods (kubectl get pods -A --field-selector spec.nodeName=NODE)",
			o.pods, len(nodes), strings.Join(nodes, ", ")))
	}
	active := activeOnNode(running, node, stderr)
	warnMissing(stderr, alloc, newPod)

	chain, err := admission.New(admission.Deps{
		ActivePods: func() []*v1.Pod { return active },
		Conditions: noConditions{},
		Node:       func() (admission.Node, error) { return admission.Node{Allocatable: alloc}, nil },
		Preemption: true,
	})
	if err != nil {
		return err
	}
	resp := chain.Admit(ctx, newPod)
	doc := preemptionJSON(newPod, resp)
	if o.out.json() {
		return writeJSON(stdout, doc)
	}
	return writePreemptionTable(stdout, newPod, alloc, resp)
}

// nodeAllocatable resolves the node's allocatable resources from the flags.
func (o *explainPreemptionOpts) nodeAllocatable(ctx context.Context, stderr io.Writer) (v1.ResourceList, error) {
	switch {
	case o.allocatable != "" && (o.capacity != "" || o.config != ""):
		return nil, badInput(errors.New("explain preemption: give either --allocatable or --capacity (with --config), not both"))
	case o.allocatable != "":
		alloc, err := parseResourceList("--allocatable", o.allocatable)
		if err != nil {
			return nil, err
		}
		if _, ok := alloc[v1.ResourcePods]; !ok {
			alloc[v1.ResourcePods] = *resource.NewQuantity(nodeapi.DefaultMaxPods, resource.DecimalSI)
		}
		return alloc, nil
	case o.capacity == "":
		return nil, badInput(errors.New("explain preemption: --allocatable or --capacity is required"))
	}
	capacity, err := parseResourceList("--capacity", o.capacity)
	if err != nil {
		return nil, err
	}
	cfg := config.Default()
	if o.config != "" {
		if cfg, err = loadConfig(ctx, o.config); err != nil {
			return nil, badInput(err)
		}
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintln(stderr, "warning:", decode.Escape(w))
	}
	if _, ok := capacity[v1.ResourcePods]; !ok {
		maxPods := int64(cfg.MaxPods)
		if maxPods <= 0 {
			maxPods = nodeapi.DefaultMaxPods
		}
		capacity[v1.ResourcePods] = *resource.NewQuantity(maxPods, resource.DecimalSI)
	}
	return admission.NodeAllocatable(capacity, cfg.KubeReserved, cfg.SystemReserved, cfg.Eviction.Thresholds), nil
}

// parseResourceList parses NAME=QUANTITY,... as given to flag.
func parseResourceList(flag, s string) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, value, ok := strings.Cut(entry, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" {
			return nil, badInput(fmt.Errorf("%s: entry %q: want NAME=QUANTITY", flag, entry))
		}
		q, err := quantity.Parse(value)
		if err != nil {
			return nil, badInput(fmt.Errorf("%s: %s: %q is not a valid quantity", flag, name, value))
		}
		if q.Sign() < 0 {
			return nil, badInput(fmt.Errorf("%s: %s: %q must not be negative", flag, name, value))
		}
		if !quantity.FitsInt64(name, q) {
			return nil, badInput(fmt.Errorf("%s: %s: %q: too large", flag, name, value))
		}
		if _, dup := out[v1.ResourceName(name)]; dup {
			return nil, badInput(fmt.Errorf("%s: %s given twice", flag, name))
		}
		out[v1.ResourceName(name)] = q
	}
	if len(out) == 0 {
		return nil, badInput(fmt.Errorf("%s: no resources in %q", flag, s))
	}
	return out, nil
}

// noConditions is a node without pressure: a snapshot has no eviction state.
type noConditions struct{}

func (noConditions) Conditions() []v1.NodeConditionType { return nil }

// The JSON document of explain preemption; a stable interface, documented in docs/explain.md.
type preemptionDoc struct {
	Critical bool                 `json:"critical"`
	Admitted bool                 `json:"admitted"`
	Failures []preemptFailureJSON `json:"failures"`
	Victims  []victimJSON         `json:"victims"`
	Error    *string              `json:"error"`
}

type preemptFailureJSON struct {
	Resource  string `json:"resource"`
	Requested string `json:"requested"`
	Used      string `json:"used"`
	Capacity  string `json:"capacity"`
}

type victimJSON struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	QOS       string `json:"qos"`
	Priority  int32  `json:"priority"`
}

func preemptionJSON(pod *v1.Pod, resp admission.Response) preemptionDoc {
	doc := preemptionDoc{
		Critical: preemption.IsCritical(pod),
		Admitted: resp.Admit,
		Failures: []preemptFailureJSON{},
		Victims:  []victimJSON{},
	}
	for _, ir := range insufficient(resp.Failures) {
		doc.Failures = append(doc.Failures, preemptFailureJSON{
			Resource:  string(ir.ResourceName),
			Requested: amountString(ir.ResourceName, ir.Requested),
			Used:      amountString(ir.ResourceName, ir.Used),
			Capacity:  amountString(ir.ResourceName, ir.Capacity),
		})
	}
	for _, k := range resp.Victims() {
		v := k.Pod
		doc.Victims = append(doc.Victims, victimJSON{
			Namespace: v.Namespace, Name: v.Name, QOS: string(qos.Class(v)), Priority: qos.Priority(v),
		})
	}
	if !resp.Admit {
		msg := resp.Reason + ": " + resp.Message
		doc.Error = &msg
	}
	return doc
}

// insufficient returns the resource failures among failures.
func insufficient(failures []error) []*preemption.InsufficientResource {
	var out []*preemption.InsufficientResource
	for _, f := range failures {
		var ir *preemption.InsufficientResource
		if errors.As(f, &ir) {
			out = append(out, ir)
		}
	}
	return out
}

// amountString renders an amount in InsufficientResource units as a quantity.
func amountString(name v1.ResourceName, v int64) string {
	switch {
	case name == v1.ResourceCPU:
		return resource.NewMilliQuantity(v, resource.DecimalSI).String()
	case name == v1.ResourceMemory || name == v1.ResourceEphemeralStorage || strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix):
		return resource.NewQuantity(v, resource.BinarySI).String()
	}
	return resource.NewQuantity(v, resource.DecimalSI).String()
}

func criticalWhy(pod *v1.Pod) string {
	switch {
	case qos.IsStatic(pod):
		return "yes (static pod, source " + pod.Annotations[qos.ConfigSourceAnnotation] + ")"
	case qos.IsMirror(pod):
		return "yes (mirror pod)"
	case preemption.IsCritical(pod):
		return fmt.Sprintf("yes (priority %d >= %d)", qos.Priority(pod), qos.SystemCriticalPriority)
	}
	return fmt.Sprintf("no (priority %d; only static, mirror and priority >= %d pods preempt)", qos.Priority(pod), qos.SystemCriticalPriority)
}

func writePreemptionTable(w io.Writer, pod *v1.Pod, alloc v1.ResourceList, resp admission.Response) error {
	name := pod.Name
	if pod.Namespace != "" {
		name = pod.Namespace + "/" + pod.Name
	}
	fmt.Fprintf(w, "Pod:       %s (%s, priority %d)\n", name, qos.Class(pod), qos.Priority(pod))
	fmt.Fprintf(w, "Critical:  %s\n", criticalWhy(pod))
	switch {
	case resp.Admit && len(resp.Victims()) > 0:
		fmt.Fprintf(w, "Admitted:  yes, after preempting %d pod(s)\n", len(resp.Victims()))
	case resp.Admit:
		fmt.Fprintln(w, "Admitted:  yes, it fits as is")
	default:
		fmt.Fprintf(w, "Admitted:  no: %s: %s\n", resp.Reason, resp.Message)
	}
	fmt.Fprintf(w, "Allocatable: %s\n", formatList(alloc))

	irs := insufficient(resp.Failures)
	if len(resp.Failures) > 0 {
		fmt.Fprintln(w, "\nWhy it does not fit as is:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RESOURCE\tREQUESTED\tUSED\tCAPACITY\tSHORT BY")
		for _, ir := range irs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ir.ResourceName,
				amountString(ir.ResourceName, ir.Requested), amountString(ir.ResourceName, ir.Used),
				amountString(ir.ResourceName, ir.Capacity), amountString(ir.ResourceName, ir.Insufficient()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, f := range resp.Failures {
			var pf *admission.PredicateFailure
			if errors.As(f, &pf) {
				fmt.Fprintf(w, "%s: %s\n", pf.Name, pf.Description)
			}
		}
	}
	if len(resp.Victims()) == 0 {
		if len(resp.Failures) > 0 {
			fmt.Fprintln(w, "\nVictims: none")
		}
		return nil
	}
	fmt.Fprintln(w, "\nVictims, in the order they would be killed:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tNAMESPACE\tNAME\tQOS\tPRIORITY\tFREES")
	for i, k := range resp.Victims() {
		v := k.Pod
		var frees []string
		for _, ir := range irs {
			if n := preemption.Request(v, ir.ResourceName); n > 0 {
				frees = append(frees, string(ir.ResourceName)+"="+amountString(ir.ResourceName, n))
			}
		}
		if len(frees) == 0 {
			frees = []string{"nothing needed"}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", i+1, v.Namespace, v.Name, qos.Class(v), qos.Priority(v), strings.Join(frees, ", "))
	}
	return tw.Flush()
}

// formatList renders a resource list as NAME=QUANTITY, sorted by name.
func formatList(l v1.ResourceList) string {
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, string(n))
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		q := l[v1.ResourceName(n)]
		parts[i] = n + "=" + q.String()
	}
	return strings.Join(parts, ",")
}

// warnMissing warns about standard resources the new pod requests but the node
// description leaves out: they count as 0 there, as on a node reporting none.
func warnMissing(w io.Writer, alloc v1.ResourceList, pod *v1.Pod) {
	for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		if _, ok := alloc[r]; ok {
			continue
		}
		for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
			if q, ok := c.Resources.Requests[r]; ok && !q.IsZero() {
				fmt.Fprintf(w, "warning: the node's allocatable has no %s; it counts as 0 (give it in --allocatable or --capacity)\n", decode.Escape(string(r)))
				break
			}
		}
	}
}

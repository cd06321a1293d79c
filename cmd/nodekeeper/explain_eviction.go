package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/offline/snapshot"
	"github.com/nodekeeper/nodekeeper/qos"
)

func newExplainEvictionCmd() *cobra.Command {
	var o explainEvictionOpts
	cmd := explainCommand(&o.out,
		"eviction (--pods FILE --summary FILE [--config FILE] | --live[=URL]) [--signal SIGNAL] [--image-fs auto|none|dedicated|split] [-o table|json]",
		"Show which thresholds are met and which pod node-pressure eviction picks",
		`Replays one eviction pass on a snapshot: PODS as 'kubectl get pods -o json|yaml' prints
them, SUMMARY as 'kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary' prints it,
and optionally the node's KubeletConfiguration file (default: the kubelet's defaults).
Finished pods and pods bound to another node than the Summary's are left out, with a
warning, so a cluster-wide 'kubectl get pods -A -o json' works too.
A snapshot has no history, so every grace period is taken as elapsed.
With --signal, the pods are ranked for that signal even when no threshold is met.
With --live, the pods, the Summary and the configuration come from a running
'nodekeeper run' (/pods, /stats/summary, /configz) through its unix socket
(root only; default `+defaultSocket+`, or --live=PATH), or from
--live=URL (URL/pods, URL/stats/summary, URL/configz, e.g. kubectl proxy's
http://127.0.0.1:8001/api/v1/nodes/NODE/proxy; a read-only port serves no
/configz): the live node is ranked now.`,
		o.run)
	f := cmd.Flags()
	f.StringVar(&o.pods, "pods", "", "pods file (PodList, List or Pod stream; JSON or YAML)")
	f.StringVar(&o.summary, "summary", "", "kubelet stats Summary JSON")
	f.StringVar(&o.config, "config", "", "KubeletConfiguration file (default: kubelet defaults)")
	f.StringVar(&o.signal, "signal", "", "rank pods for this signal (e.g. memory.available) even if no threshold is met")
	f.StringVar(&o.layout, "image-fs", "auto", "disk layout: auto (detect from the Summary), none, dedicated or split")
	f.StringVar(&o.live, "live", "", "rank the node of the running nodekeeper now, through this unix socket (default "+defaultSocket+") or URL")
	f.Lookup("live").NoOptDefVal = defaultSocket
	return cmd
}

type explainEvictionOpts struct {
	pods, summary, config, signal, layout, live string
	out                                         outputFlag
}

func (o *explainEvictionOpts) run(ctx context.Context, stdout, stderr io.Writer) error {
	if err := o.out.validate(); err != nil {
		return err
	}
	if o.live != "" {
		if o.pods != "" || o.summary != "" || o.config != "" {
			return badInput(errors.New("explain eviction: --live reads pods, summary and configuration from the agent: drop --pods, --summary and --config"))
		}
		if !isURL(o.live) && !filepath.IsAbs(o.live) {
			return badInput(fmt.Errorf("--live %q: want the agent's unix socket (an absolute path) or an http:// or https:// URL", o.live))
		}
	} else if o.pods == "" || o.summary == "" {
		return badInput(errors.New("explain eviction: --pods and --summary are required (or --live)"))
	}
	var signals []eviction.Signal
	if o.signal != "" {
		s := eviction.Signal(o.signal)
		if _, ok := s.Resource(); !ok {
			return badInput(fmt.Errorf("--signal: unknown eviction signal %q (known: %s)", o.signal, signalNames()))
		}
		signals = []eviction.Signal{s}
	}
	var layout *eviction.DiskLayout
	switch o.layout {
	case "auto":
	case "none", "dedicated", "split":
		l := map[string]eviction.DiskLayout{"none": eviction.NoImageFs, "dedicated": eviction.DedicatedImageFs, "split": eviction.SplitImageFs}[o.layout]
		layout = &l
	default:
		return badInput(fmt.Errorf("--image-fs: unknown layout %q (want auto, none, dedicated or split)", o.layout))
	}
	cfg := config.Default()
	var live func(path string) ([]byte, string, error) // reads the agent, with --live
	if o.live != "" {
		c, base, sock := http.DefaultClient, strings.TrimSuffix(o.live, "/"), ""
		if !isURL(o.live) {
			c, base, sock = unixClient(o.live), "http://localhost", o.live
		}
		live = func(path string) ([]byte, string, error) { return readAgent(ctx, c, base, sock, path) }
		c2, err := loadConfigz(live)
		if err != nil {
			return liveError(err)
		}
		cfg = c2
	} else if o.config != "" {
		c, err := loadConfig(ctx, o.config)
		if err != nil {
			return badInput(err)
		}
		cfg = c
	}
	if o.live == "" {
		// A served configuration lists every field, set or not: its
		// warnings would say nothing about the node's file.
		for _, w := range cfg.Warnings {
			fmt.Fprintln(stderr, "warning:", decode.Escape(w))
		}
	}
	var pods []*v1.Pod
	var summary *statsapi.Summary
	var err error
	if live != nil {
		if pods, summary, err = loadLive(live); err != nil {
			return liveError(err)
		}
	} else {
		pods, err = loadPods(ctx, o.pods)
		if err == nil {
			summary, err = loadSummary(ctx, o.summary)
		}
		if err != nil {
			return badInput(err)
		}
	}
	pods = activeOnNode(pods, summary.Node.NodeName, stderr)
	d := eviction.Decide(cfg.Eviction, eviction.Snapshot{Pods: pods, Summary: summary, Layout: layout},
		signals, cfg.Eviction.LocalStorageCapacityIsolation)
	if o.out.json() {
		return writeJSON(stdout, evictionJSON(d))
	}
	return writeEvictionTable(stdout, d)
}

func signalNames() string {
	names := make([]string, len(eviction.Signals))
	for i, s := range eviction.Signals {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// The JSON document of explain eviction; a stable interface, documented in docs/explain.md.
type evictionDoc struct {
	Layout        string                     `json:"layout"`
	Observations  map[string]observationJSON `json:"observations"`
	ThresholdsMet []thresholdJSON            `json:"thresholdsMet"`
	Conditions    []string                   `json:"conditions"`
	Rankings      []rankingJSON              `json:"rankings"`
	Evict         *evictJSON                 `json:"evict"`
}

type observationJSON struct {
	Available string `json:"available"`
	Capacity  string `json:"capacity"`
}

type thresholdJSON struct {
	Signal      string `json:"signal"`
	Operator    string `json:"operator"`
	Value       string `json:"value"`
	GracePeriod string `json:"gracePeriod"`
}

type rankingJSON struct {
	Signal string          `json:"signal"`
	Pods   []rankedPodJSON `json:"pods"`
}

type rankedPodJSON struct {
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	UID            string `json:"uid"`
	QOS            string `json:"qos"`
	Priority       int32  `json:"priority"`
	Usage          string `json:"usage"`
	Request        string `json:"request"`
	ExceedsRequest bool   `json:"exceedsRequest"`
}

type evictJSON struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Signal    string `json:"signal"`
	Message   string `json:"message"`
}

func evictionJSON(d eviction.Decision) evictionDoc {
	doc := evictionDoc{
		Layout:        d.Layout.String(),
		Observations:  map[string]observationJSON{},
		ThresholdsMet: []thresholdJSON{},
		Conditions:    []string{},
		Rankings:      []rankingJSON{},
	}
	for s, o := range d.Observations {
		doc.Observations[string(s)] = observationJSON{Available: qty(o.Available), Capacity: qty(o.Capacity)}
	}
	for _, t := range d.ThresholdsMet {
		doc.ThresholdsMet = append(doc.ThresholdsMet, thresholdJSON{
			Signal: string(t.Signal), Operator: string(t.Operator), Value: t.Value.String(), GracePeriod: t.GracePeriod.String(),
		})
	}
	for _, c := range d.Conditions {
		doc.Conditions = append(doc.Conditions, string(c))
	}
	for _, r := range d.Rankings {
		rj := rankingJSON{Signal: string(r.Signal), Pods: []rankedPodJSON{}}
		for _, p := range r.Pods {
			rj.Pods = append(rj.Pods, rankedPodJSON{
				Namespace: p.Pod.Namespace, Name: p.Pod.Name, UID: string(p.Pod.UID),
				QOS: string(qos.Class(p.Pod)), Priority: p.Usage.Priority,
				Usage: qtyv(p.Usage.UsageQuantity()), Request: qtyv(p.Usage.RequestQuantity()), ExceedsRequest: p.Usage.ExceedsRequest,
			})
		}
		doc.Rankings = append(doc.Rankings, rj)
	}
	if len(d.Evictions) > 0 {
		e := d.Evictions[0]
		doc.Evict = &evictJSON{Namespace: e.Pod.Namespace, Name: e.Pod.Name, Signal: string(e.Signal), Message: e.Message}
	}
	return doc
}

// qty renders a quantity for people: binary units when the value is a whole
// number of MiB, decimal units otherwise (1800M rather than 1800000000). Either
// form parses as a Kubernetes quantity.
func qty(q *resource.Quantity) string {
	if q == nil {
		return ""
	}
	v := q.Value()
	if v%(1<<20) == 0 {
		return resource.NewQuantity(v, resource.BinarySI).String()
	}
	return resource.NewQuantity(v, resource.DecimalSI).String()
}

func qtyv(q resource.Quantity) string { return qty(&q) }

// observed renders an observation of signal s for the table.
func observed(s eviction.Signal, q *resource.Quantity) string {
	if q == nil {
		return "-"
	}
	r, _ := s.Resource()
	return humanAmount(q.Value(), r == eviction.ResourceInodes || r == eviction.ResourcePIDs)
}

// rankingTable renders one ranking as a table.
func rankingTable(r eviction.Ranking) (string, error) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tPOD\tQOS\tPRIORITY\tUSAGE\tREQUEST\tUSAGE-REQUEST\tWHY")
	for i, p := range r.Pods {
		u := p.Usage
		fmt.Fprintf(tw, "%d\t%s/%s\t%s\t%d\t%s\t%s\t%s\t%s\n", i+1, p.Pod.Namespace, p.Pod.Name, qos.Class(p.Pod),
			u.Priority, humanAmount(u.Usage, u.Count), humanBytes(u.Request), humanAmount(u.Usage-u.Request, u.Count), p.Reason(r.Signal))
	}
	err := tw.Flush()
	return b.String(), err
}

func writeEvictionTable(w io.Writer, d eviction.Decision) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Disk layout: %s\n\nSIGNAL\tAVAILABLE\tCAPACITY\tTHRESHOLDS\n", d.Layout)
	for _, s := range eviction.Signals {
		o, ok := d.Observations[s]
		var ts []string
		for _, t := range d.Thresholds {
			if t.Signal == s {
				kind := "hard"
				if !t.Hard() {
					kind = "soft " + t.GracePeriod.String()
				}
				met := ""
				if eviction.ContainsThreshold(d.ThresholdsMet, t) {
					met = " MET"
				}
				ts = append(ts, fmt.Sprintf("<%s (%s)%s", t.Value, kind, met))
			}
		}
		if !ok && len(ts) == 0 {
			continue
		}
		avail, capa := "-", "-"
		if ok {
			avail, capa = observed(s, o.Available), observed(s, o.Capacity)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s, avail, capa, strings.Join(ts, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	conds := "none"
	if len(d.Conditions) > 0 {
		conds = fmt.Sprint(d.Conditions)
	}
	fmt.Fprintf(w, "\nNode conditions: %s\n", conds)
	for _, v := range d.Violations {
		fmt.Fprintf(w, "Local storage: %s/%s: %s\n", v.Pod.Namespace, v.Pod.Name, v.Message)
	}
	if d.Target != nil {
		var steps []string
		if d.Reclaim.Containers {
			steps = append(steps, "delete dead containers")
		}
		if d.Reclaim.Images {
			steps = append(steps, "delete unused images")
		}
		if len(steps) == 0 {
			steps = []string{"nothing"}
		}
		fmt.Fprintf(w, "Reclaiming %s: node-level reclaim first: %s; then evict one pod if still met\n",
			d.Target.Signal, strings.Join(steps, ", then "))
	}
	// Signals measured on one filesystem (nodefs.available and imagefs.available
	// on a node without an image filesystem) rank the pods identically: such a
	// ranking is printed once, under all its signals.
	var tables []string
	var signals [][]string
	for _, r := range d.Rankings {
		t, err := rankingTable(r)
		if err != nil {
			return err
		}
		if i := slices.Index(tables, t); i >= 0 {
			signals[i] = append(signals[i], string(r.Signal))
			continue
		}
		tables = append(tables, t)
		signals = append(signals, []string{string(r.Signal)})
	}
	for i, t := range tables {
		fmt.Fprintf(w, "\nRanking for %s:\n%s", strings.Join(signals[i], ", "), t)
	}
	if len(d.Evictions) > 0 {
		e := d.Evictions[0]
		fmt.Fprintf(w, "\nWould evict %s/%s (grace period %s):\n  %s\n", e.Pod.Namespace, e.Pod.Name, e.GracePeriod, e.Message)
	} else {
		fmt.Fprintln(w, "\nWould evict: none")
	}
	return nil
}

// liveError classes err, met reading the agent with --live: an agent that
// does not answer (the error says what to do, as get's does) or fails is a
// runtime error, exit 1; a --live URL without what --live reads (404: a
// read-only port serves no /configz) is a usage error, exit 2, as is an
// answer over --max-input-size (decode.ErrBadInput).
func liveError(err error) error {
	if se := (*statusError)(nil); errors.As(err, &se) && se.code == http.StatusNotFound {
		return badInput(err)
	}
	return err
}

// loadConfigz reads the configuration a running agent serves at /configz
// through read, the kubelet's document {"kubeletconfig": KubeletConfiguration}.
func loadConfigz(read func(path string) ([]byte, string, error)) (*config.Config, error) {
	data, name, err := read("/configz")
	if err != nil {
		return nil, fmt.Errorf("load kubelet configuration: %w", err)
	}
	var doc struct {
		KubeletConfig json.RawMessage `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: not a configz document: %w", name, err)
	}
	if len(doc.KubeletConfig) == 0 {
		return nil, fmt.Errorf("%s: field kubeletconfig: missing", name)
	}
	return config.Parse(name, doc.KubeletConfig)
}

// loadLive reads a running agent's pods and Summary through read.
func loadLive(read func(path string) ([]byte, string, error)) ([]*v1.Pod, *statsapi.Summary, error) {
	data, name, err := read("/pods")
	if err != nil {
		return nil, nil, err
	}
	pods, err := snapshot.ParsePods(name, data)
	if err != nil {
		return nil, nil, err
	}
	if data, name, err = read("/stats/summary"); err != nil {
		return nil, nil, err
	}
	summary, err := snapshot.ParseSummary(name, data)
	return pods, summary, err
}

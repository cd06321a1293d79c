package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/imagegc"
	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
	"github.com/nodekeeper/nodekeeper/internal/offline/crisnapshot"
)

func newExplainImageGCCmd() *cobra.Command {
	var o explainImageGCOpts
	cmd := explainCommand(&o.out,
		"imagegc --images FILE --containers FILE --imagefs FILE [--capacity QTY [--available QTY]] [--records FILE] [--config FILE] [--sandbox-image REF] [--now TIME] [-o table|json]",
		"Show which images image garbage collection would remove, in which order, and why the others stay",
		`Replays one periodic image GC pass on a snapshot of a node:
IMAGES as 'crictl images -o json' prints them, CONTAINERS as 'crictl ps -a -o json'
prints them (containers keep their images, exited ones too), and IMAGEFS either as
'crictl imagefsinfo -o json' prints it, with --capacity (and optionally
--available; default capacity minus the used bytes), or the kubelet's
/stats/summary JSON, whose node.runtime.imageFs has capacity and available bytes.
--records gives {IMAGE_ID: {"firstDetected": RFC3339, "lastUsed": RFC3339}};
without it every image was first detected long ago and never used.
The policy comes from the KubeletConfiguration in --config (default: the
kubelet's 85/80, 2m, no maximum age). The maximum age applies as if GC had been
running longer than it.`,
		o.run)
	f := cmd.Flags()
	f.StringVar(&o.images, "images", "", "'crictl images -o json' output")
	f.StringVar(&o.containers, "containers", "", "'crictl ps -a -o json' output")
	f.StringVar(&o.imagefs, "imagefs", "", "'crictl imagefsinfo -o json' output, or kubelet /stats/summary JSON")
	f.StringVar(&o.records, "records", "", `image records: {ID: {"firstDetected": RFC3339, "lastUsed": RFC3339}}`)
	f.StringVar(&o.config, "config", "", "KubeletConfiguration file (default: kubelet defaults)")
	f.StringVar(&o.now, "now", "", "time of the GC pass, RFC3339 (default: now)")
	f.StringVar(&o.sandbox, "sandbox-image", "", "pod sandbox (pause) image reference, always kept")
	f.StringVar(&o.capacity, "capacity", "", "image filesystem capacity (e.g. 100Gi), with crictl imagefsinfo input")
	f.StringVar(&o.available, "available", "", "image filesystem available bytes (default: capacity minus used)")
	return cmd
}

// imageGCInput is a loaded snapshot with the pass's policy and time.
type imageGCInput struct {
	node   crisnapshot.Node
	policy imagegc.Policy
	now    time.Time
}

func (o *explainImageGCOpts) load(ctx context.Context, stderr io.Writer) (*imageGCInput, error) {
	if o.images == "" || o.containers == "" || o.imagefs == "" {
		return nil, errors.New("explain imagegc: --images, --containers and --imagefs are required")
	}
	in := &imageGCInput{policy: imagegc.DefaultPolicy(), now: time.Now()}
	if o.now != "" {
		t, err := time.Parse(time.RFC3339, o.now)
		if err != nil {
			return nil, fmt.Errorf("--now: %q is not an RFC3339 time", o.now)
		}
		in.now = t
	}
	if o.config != "" {
		cfg, err := loadConfig(ctx, o.config)
		if err != nil {
			return nil, err
		}
		for _, w := range cfg.Warnings {
			fmt.Fprintln(stderr, "warning:", decode.Escape(w))
		}
		in.policy = imagegc.PolicyFromKubelet(&cfg.Kubelet)
		if err := in.policy.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", o.config, err)
		}
	}
	var err error
	data, err := readInput(ctx, o.images)
	if err != nil {
		return nil, err
	}
	if in.node.Images, err = crisnapshot.ParseImages(o.images, data); err != nil {
		return nil, err
	}
	if data, err = readInput(ctx, o.containers); err != nil {
		return nil, err
	}
	if in.node.Containers, err = crisnapshot.ParseContainers(o.containers, data); err != nil {
		return nil, err
	}
	if in.node.Fs, err = o.loadImageFs(ctx); err != nil {
		return nil, err
	}
	if o.records != "" {
		if data, err = readInput(ctx, o.records); err != nil {
			return nil, err
		}
		if in.node.Records, err = crisnapshot.ParseRecords(o.records, data, in.node.Images, stderr); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// loadImageFs reads --imagefs: the kubelet Summary, or crictl imagefsinfo with
// --capacity and --available.
func (o *explainImageGCOpts) loadImageFs(ctx context.Context) (imagegc.FsStats, error) {
	data, err := readInput(ctx, o.imagefs)
	if err != nil {
		return imagegc.FsStats{}, err
	}
	fs, err := crisnapshot.ParseImageFs(o.imagefs, data)
	if err != nil {
		return imagegc.FsStats{}, err
	}
	if fs.FromSummary {
		if o.capacity != "" || o.available != "" {
			return imagegc.FsStats{}, errors.New("--capacity and --available apply to crictl imagefsinfo input, not to a Summary")
		}
		return fs.Stats, nil
	}
	if o.capacity == "" {
		return imagegc.FsStats{}, fmt.Errorf("%s: crictl imagefsinfo has no capacity; give --capacity (e.g. --capacity 100Gi)", o.imagefs)
	}
	capacity, err := parseBytes("--capacity", o.capacity)
	if err != nil {
		return imagegc.FsStats{}, err
	}
	if fs.UsedBytes > capacity {
		return imagegc.FsStats{}, fmt.Errorf("%s: used bytes %d exceed --capacity %q", o.imagefs, fs.UsedBytes, o.capacity)
	}
	available := capacity - fs.UsedBytes
	if o.available != "" {
		if available, err = parseBytes("--available", o.available); err != nil {
			return imagegc.FsStats{}, err
		}
		if available > capacity {
			return imagegc.FsStats{}, fmt.Errorf("--available: %q exceeds --capacity %q", o.available, o.capacity)
		}
	}
	return imagegc.FsStats{CapacityBytes: capacity, AvailableBytes: available}, nil
}

// parseBytes parses a byte quantity flag. Like --memory-capacity, it must be below
// 2^63-1: the parser clamps larger binary-suffixed values (9Ei, 16Ei) to exactly
// that, so a capacity of 16Ei would silently become 8Ei.
func parseBytes(flag, s string) (int64, error) {
	q, err := quantity.Parse(s)
	if err != nil || q.Sign() < 0 {
		return 0, fmt.Errorf("%s: %q is not a byte quantity (e.g. 100Gi)", flag, s)
	}
	if !quantity.FitsInt64("", q) {
		return 0, fmt.Errorf("%s %q: too large", flag, s)
	}
	return q.Value(), nil
}

type explainImageGCOpts struct {
	images, containers, imagefs, records, config, now, sandbox, capacity, available string
	out                                                                             outputFlag
}

func (o *explainImageGCOpts) run(ctx context.Context, stdout, stderr io.Writer) error {
	if err := o.out.validate(); err != nil {
		return err
	}
	in, err := o.load(ctx, stderr)
	if err != nil {
		return badInput(oneLine(err))
	}
	plan, err := in.node.PlanImageGC(in.policy, o.sandbox, in.now)
	if err != nil {
		return badInput(oneLine(fmt.Errorf("%s: %w (the kubelet emits InvalidDiskCapacity)", o.imagefs, err)))
	}
	if o.out.json() {
		return writeJSON(stdout, imageGCJSON(plan))
	}
	return writeImageGCTable(stdout, in, plan)
}

// oneLine keeps an error message on one line.
func oneLine(err error) error {
	msg := err.Error()
	if !strings.ContainsAny(msg, "\r\n") {
		return err
	}
	return errors.New(strings.Join(strings.Fields(msg), " "))
}

// The JSON document of explain imagegc; a stable interface, documented in docs/explain.md.
type imageGCDoc struct {
	UsagePercent int               `json:"usagePercent"`
	BytesToFree  int64             `json:"bytesToFree"`
	Remove       []imageRemoveJSON `json:"remove"`
	Kept         []imageKeptJSON   `json:"kept"`
	Freed        int64             `json:"freed"`
}

type imageRemoveJSON struct {
	ID     string   `json:"id"`
	Tags   []string `json:"tags"`
	Size   int64    `json:"size"`
	Reason string   `json:"reason"`
}

type imageKeptJSON struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

func imageGCJSON(p imagegc.Plan) imageGCDoc {
	doc := imageGCDoc{UsagePercent: p.UsagePercent, BytesToFree: p.BytesToFree, Freed: p.Freed,
		Remove: []imageRemoveJSON{}, Kept: []imageKeptJSON{}}
	for _, r := range p.Remove {
		tags := r.Tags
		if tags == nil {
			tags = []string{}
		}
		doc.Remove = append(doc.Remove, imageRemoveJSON{ID: r.ID, Tags: tags, Size: r.Size, Reason: string(r.Reason)})
	}
	for _, k := range p.Kept {
		doc.Kept = append(doc.Kept, imageKeptJSON{ID: k.ID, Reason: string(k.Reason)})
	}
	return doc
}

func writeImageGCTable(w io.Writer, in *imageGCInput, p imagegc.Plan) error {
	pol := in.policy
	fmt.Fprintf(w, "Image filesystem: %d%% used (capacity %s, available %s); high threshold %d%%, low %d%%\n",
		p.UsagePercent, bytesString(in.node.Fs.CapacityBytes), bytesString(in.node.Fs.AvailableBytes), pol.HighThresholdPercent, pol.LowThresholdPercent)
	maxAge := "off"
	if pol.MaxAge > 0 {
		maxAge = pol.MaxAge.String()
	}
	fmt.Fprintf(w, "Policy: minimum age %v, maximum age %s; at %s\n", pol.MinAge, maxAge, in.now.UTC().Format(time.RFC3339))
	if p.BytesToFree > 0 {
		fmt.Fprintf(w, "Bytes to free: %d (%s) to reach %d%%\n", p.BytesToFree, bytesString(p.BytesToFree), pol.LowThresholdPercent)
	} else {
		fmt.Fprintln(w, "Bytes to free: 0 (below the high threshold)")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(p.Remove) == 0 {
		fmt.Fprintln(w, "Remove: none")
	} else {
		fmt.Fprintln(tw, "#\tREMOVE\tTAGS\tSIZE\tREASON")
		for i, r := range p.Remove {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", i+1, shortID(r.ID), tagList(r.Tags), bytesString(r.Size), removeReason(r))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEEP\tTAGS\tSIZE\tREASON")
	for _, k := range p.Kept {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", shortID(k.ID), tagList(k.Tags), bytesString(k.Size), k.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nWould free: %d (%s)\n", p.Freed, bytesString(p.Freed))
	// As GarbageCollect does, compare the target with what the space step frees.
	bySpace := p.FreedBy(imagegc.ReasonSpace)
	if p.BytesToFree > 0 && bySpace < p.BytesToFree {
		fmt.Fprintf(w, "Less than wanted: the kubelet emits FreeDiskSpaceFailed: %s\n",
			imagegc.FreeDiskSpaceFailedMessage(p.UsagePercent, in.node.Fs.CapacityBytes, bySpace))
	}
	return nil
}

func removeReason(r imagegc.Removal) string {
	last := "never used"
	if !r.LastUsed.IsZero() {
		last = "last used " + r.LastUsed.UTC().Format(time.RFC3339)
	}
	if r.Reason == imagegc.ReasonAge {
		return "age: unused longer than the maximum age (" + last + ")"
	}
	return "space: " + last
}

func shortID(id string) string {
	if s, ok := strings.CutPrefix(id, "sha256:"); ok && len(s) > 12 {
		return s[:12]
	}
	return id
}

func tagList(tags []string) string {
	if len(tags) == 0 {
		return "<none>"
	}
	return strings.Join(tags, ",")
}

func bytesString(n int64) string {
	return resource.NewQuantity(n, resource.BinarySI).String()
}

package simulate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/offline/snapshot"
)

// ErrBadScenario is the class of every error about a scenario file's content (decode.ErrBadInput).
var ErrBadScenario = decode.ErrBadInput

// Scenario is a parsed scenario file.
type Scenario struct {
	Config    *config.Config
	Node      Node
	Loops     bool
	Steps     []Step
	Until     time.Duration
	Container ContainerGCPolicy
}

// Node is the simulated node.
type Node struct {
	Capacity v1.ResourceList
	// DedicatedImageFs: the runtime keeps its images on a filesystem of their
	// own, not on the node filesystem.
	DedicatedImageFs bool
	// ContainerFs is where the containers' writable layers live (scenario key
	// node.containerFs): ContainerFsImageFs, with the images (the default with a
	// dedicated image filesystem), or ContainerFsNodeFs, on the node filesystem
	// (the default without one; with one, the split layout of KEP-4191).
	ContainerFs string
}

// The values of Node.ContainerFs.
const (
	ContainerFsNodeFs  = "nodefs"
	ContainerFsImageFs = "imagefs"
)

// Layout is the node's disk layout as the eviction manager names it.
func (n Node) Layout() eviction.DiskLayout {
	switch {
	case !n.DedicatedImageFs:
		return eviction.NoImageFs
	case n.ContainerFs == ContainerFsNodeFs:
		return eviction.SplitImageFs
	}
	return eviction.DedicatedImageFs
}

// ContainerGCPolicy is the kubelet's container GC policy (flags, not
// KubeletConfiguration fields): scenario key config.containerGC.
type ContainerGCPolicy struct {
	MinAge             time.Duration
	MaxPerPodContainer int
	MaxContainers      int
}

// Step changes the node at an offset from the start. Nil fields leave things as
// they were.
type Step struct {
	At         time.Duration
	Pods       []*v1.Pod // nil: unchanged; non-nil (possibly empty): the new set
	Summary    *statsapi.Summary
	Images     []*runtimeapi.Image // nil: unchanged
	Containers []*runtimeapi.Container
	ImageFs    *ImageFs
	Admit      *v1.Pod
	Do         []Action
	// StuckTerminating names pods (namespace/name, as nodeapi.PodName) whose shutdown does not
	// complete: killed, they stop being active but keep their resources until
	// a step names them in FinishTerminating.
	StuckTerminating []string
	// FinishTerminating names pods whose shutdown completes now (or, not yet
	// killed, will complete at once when they are).
	FinishTerminating []string
}

// ImageFs is the runtime's image filesystem as CRI ImageFsInfo reports it.
type ImageFs struct {
	CapacityBytes  uint64 `json:"capacityBytes"`
	AvailableBytes uint64 `json:"availableBytes"`
}

// Action is an explicit action of a step.
type Action struct {
	Name  string // detectImages, garbageCollectImages, deleteUnusedImages, freeImageSpace, garbageCollectContainers, evictionPass
	Bytes int64  // for freeImageSpace
}

var actionNames = map[string]bool{
	"detectImages": true, "garbageCollectImages": true, "deleteUnusedImages": true,
	"freeImageSpace": true, "garbageCollectContainers": true, "evictionPass": true,
}

// MaxDuration is the latest virtual time a scenario may reach: until and every
// step's at are at most this (ten years of virtual time). It keeps every time
// the managers compute from it (a deadline, a period added to now) far from
// time.Duration's limit of about 292 years.
const MaxDuration = 10 * 365 * 24 * time.Hour

type rawScenario struct {
	Config json.RawMessage `json:"config"`
	Node   struct {
		Capacity         map[string]string `json:"capacity"`
		DedicatedImageFs bool              `json:"dedicatedImageFs"`
		ContainerFs      string            `json:"containerFs"`
	} `json:"node"`
	Loops *bool             `json:"loops"`
	Steps []json.RawMessage `json:"steps"`
	Until string            `json:"until"`
}

// rawStep is a step as written. A RawMessage is nil when its key is absent, which
// is what tells "unchanged" from "empty" for pods, images and containers.
type rawStep struct {
	At         string            `json:"at"`
	Pods       json.RawMessage   `json:"pods"`
	Summary    json.RawMessage   `json:"summary"`
	Images     json.RawMessage   `json:"images"`
	Containers json.RawMessage   `json:"containers"`
	ImageFs    json.RawMessage   `json:"imageFs"`
	Admit      json.RawMessage   `json:"admit"`
	Do         []json.RawMessage `json:"do"`
	// Pods named namespace/name.
	StuckTerminating  []string `json:"stuckTerminating"`
	FinishTerminating []string `json:"finishTerminating"`
}

// Parse parses a scenario; name is used in errors.
func Parse(name string, data []byte) (*Scenario, error) {
	js, err := decode.ToJSON(data)
	if err != nil {
		return nil, decode.Badf(name, "%v", err)
	}
	var raw rawScenario
	if err := decode.Strict(js, &raw); err != nil {
		return nil, decode.Badf(name, "%v", err)
	}
	steps := make([]rawStep, len(raw.Steps))
	for i, rs := range raw.Steps {
		if err := decode.Strict(rs, &steps[i]); err != nil {
			return nil, decode.Badf(name, "steps[%d]: %v", i, err)
		}
	}

	sc := &Scenario{Loops: raw.Loops == nil || *raw.Loops, Container: ContainerGCPolicy{MaxPerPodContainer: 1, MaxContainers: -1}}
	if sc.Config, sc.Container, err = parseConfig(name, raw.Config, sc.Container); err != nil {
		return nil, err
	}
	sc.Node.DedicatedImageFs = raw.Node.DedicatedImageFs
	switch sc.Node.ContainerFs = raw.Node.ContainerFs; sc.Node.ContainerFs {
	case "", ContainerFsNodeFs:
	case ContainerFsImageFs:
		if !sc.Node.DedicatedImageFs {
			return nil, decode.Badf(name, "node.containerFs: %q: needs dedicatedImageFs: true (without it images and writable layers share the node filesystem)", sc.Node.ContainerFs)
		}
	default:
		return nil, decode.Badf(name, "node.containerFs: %q: want %s or %s", sc.Node.ContainerFs, ContainerFsNodeFs, ContainerFsImageFs)
	}
	sc.Node.Capacity = v1.ResourceList{}
	for k, v := range raw.Node.Capacity {
		q, err := quantity.Parse(v)
		if err != nil {
			return nil, decode.Badf(name, "node.capacity[%s]: %q: %v", k, v, err)
		}
		if q.Sign() < 0 {
			return nil, decode.Badf(name, "node.capacity[%s]: %q: must not be negative", k, v)
		}
		if !quantity.FitsInt64(k, q) {
			return nil, decode.Badf(name, "node.capacity[%s]: %q: too large", k, v)
		}
		sc.Node.Capacity[v1.ResourceName(k)] = q
	}
	if sc.Until, err = parseDuration(raw.Until); err != nil || raw.Until == "" || sc.Until < 0 {
		return nil, decode.Badf(name, "until: %q: want a non-negative duration such as 10m", raw.Until)
	}
	if sc.Until > MaxDuration {
		return nil, decode.Badf(name, "until: %q: beyond the maximum of %s (10 years of virtual time)", raw.Until, MaxDuration)
	}
	var last time.Duration
	for i, rs := range steps {
		st, err := parseStep(name, i, rs)
		if err != nil {
			return nil, err
		}
		if st.At < last {
			return nil, decode.Badf(name, "steps[%d].at: %q: steps must be in time order", i, rs.At)
		}
		if st.At > sc.Until {
			return nil, decode.Badf(name, "steps[%d].at: %q: after until (%s)", i, rs.At, sc.Until)
		}
		last = st.At
		sc.Steps = append(sc.Steps, st)
	}
	sort.SliceStable(sc.Steps, func(a, b int) bool { return sc.Steps[a].At < sc.Steps[b].At })
	return sc, nil
}

func parseConfig(name string, raw json.RawMessage, gc ContainerGCPolicy) (*config.Config, ContainerGCPolicy, error) {
	fields := map[string]json.RawMessage{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &fields); err != nil {
			return nil, gc, decode.Badf(name, "config: %v", err)
		}
	}
	if g, ok := fields["containerGC"]; ok {
		var p struct {
			MinAge             string `json:"minAge"`
			MaxPerPodContainer *int   `json:"maxPerPodContainer"`
			MaxContainers      *int   `json:"maxContainers"`
		}
		dec := json.NewDecoder(bytes.NewReader(g))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return nil, gc, decode.Badf(name, "config.containerGC: %v", err)
		}
		if p.MinAge != "" {
			d, err := parseDuration(p.MinAge)
			if err != nil || d < 0 {
				return nil, gc, decode.Badf(name, "config.containerGC.minAge: %q: want a non-negative duration", p.MinAge)
			}
			gc.MinAge = d
		}
		if p.MaxPerPodContainer != nil {
			gc.MaxPerPodContainer = *p.MaxPerPodContainer
		}
		if p.MaxContainers != nil {
			gc.MaxContainers = *p.MaxContainers
		}
		delete(fields, "containerGC")
	}
	fields["apiVersion"] = json.RawMessage(`"kubelet.config.k8s.io/v1beta1"`)
	fields["kind"] = json.RawMessage(`"KubeletConfiguration"`)
	js, _ := json.Marshal(fields)
	cfg, err := config.Parse(name+": config", js)
	if err != nil {
		return nil, gc, decode.Bad(err)
	}
	return cfg, gc, nil
}

func parseStep(name string, i int, rs rawStep) (Step, error) {
	var st Step
	var err error
	where := fmt.Sprintf("steps[%d]", i)
	if st.At, err = parseDuration(rs.At); err != nil || st.At < 0 {
		return st, decode.Badf(name, "%s.at: %q: want a non-negative duration such as 30s", where, rs.At)
	}
	if st.At > MaxDuration {
		return st, decode.Badf(name, "%s.at: %q: beyond the maximum of %s (10 years of virtual time)", where, rs.At, MaxDuration)
	}
	if rs.Pods != nil {
		st.Pods = []*v1.Pod{}
		if len(rs.Pods) > 0 && string(rs.Pods) != "null" && string(rs.Pods) != "[]" {
			pods, err := snapshot.ParsePodsStrict(name+": "+where+".pods", asList(rs.Pods))
			if err != nil {
				return st, decode.Bad(err)
			}
			st.Pods = pods
		}
	}
	if len(rs.Summary) > 0 && string(rs.Summary) != "null" {
		s, err := snapshot.ParseSummaryStrict(name+": "+where+".summary", rs.Summary)
		if err != nil {
			return st, decode.Bad(err)
		}
		st.Summary = s
	}
	if rs.Images != nil {
		imgs, err := criList(name, where+".images", "image", rs.Images, func() *runtimeapi.Image { return new(runtimeapi.Image) })
		if err != nil {
			return st, err
		}
		for j, img := range imgs {
			// The managers count bytes in int64; a larger size would wrap.
			if img.GetSize() > math.MaxInt64 {
				return st, decode.Badf(name, "%s.images[%d].size: %d: too large", where, j, img.GetSize())
			}
		}
		st.Images = imgs
	}
	if rs.Containers != nil {
		cs, err := criList(name, where+".containers", "container", rs.Containers, func() *runtimeapi.Container { return new(runtimeapi.Container) })
		if err != nil {
			return st, err
		}
		st.Containers = cs
	}
	if len(rs.ImageFs) > 0 && string(rs.ImageFs) != "null" {
		st.ImageFs = new(ImageFs)
		if err := decode.Strict(rs.ImageFs, st.ImageFs); err != nil {
			return st, decode.Badf(name, "%s.imageFs: %v", where, err)
		}
		for _, f := range []struct {
			field string
			v     uint64
		}{{"capacityBytes", st.ImageFs.CapacityBytes}, {"availableBytes", st.ImageFs.AvailableBytes}} {
			if f.v > math.MaxInt64 {
				return st, decode.Badf(name, "%s.imageFs.%s: %d: too large", where, f.field, f.v)
			}
		}
		if st.ImageFs.AvailableBytes > st.ImageFs.CapacityBytes {
			return st, decode.Badf(name, "%s.imageFs: availableBytes %d exceeds capacityBytes %d", where, st.ImageFs.AvailableBytes, st.ImageFs.CapacityBytes)
		}
	}
	if len(rs.Admit) > 0 && string(rs.Admit) != "null" {
		pods, err := snapshot.ParsePodsStrict(name+": "+where+".admit", rs.Admit)
		if err != nil {
			return st, decode.Bad(err)
		}
		if len(pods) != 1 {
			return st, decode.Badf(name, "%s.admit: want one pod, found %d", where, len(pods))
		}
		st.Admit = pods[0]
	}
	for _, f := range []struct {
		field string
		pods  []string
	}{{"stuckTerminating", rs.StuckTerminating}, {"finishTerminating", rs.FinishTerminating}} {
		for j, p := range f.pods {
			ns, pod, ok := strings.Cut(p, "/")
			if p == "" || ok && (ns == "" || pod == "" || strings.Contains(pod, "/")) {
				return st, decode.Badf(name, "%s.%s[%d]: %q: want a pod as namespace/name (name alone without a namespace)", where, f.field, j, p)
			}
		}
	}
	st.StuckTerminating, st.FinishTerminating = rs.StuckTerminating, rs.FinishTerminating
	for j, raw := range rs.Do {
		a, err := parseAction(raw)
		if err != nil {
			return st, decode.Badf(name, "%s.do[%d]: %s: %v", where, j, string(raw), err)
		}
		st.Do = append(st.Do, a)
	}
	return st, nil
}

// asList turns a JSON array of pods into a v1 List, which the pod loader reads.
func asList(raw json.RawMessage) []byte {
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' {
		return append(append([]byte(`{"kind":"List","items":`), t...), '}')
	}
	return raw
}

func parseAction(raw json.RawMessage) (Action, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if !actionNames[s] || s == "freeImageSpace" {
			return Action{}, errors.New("unknown action")
		}
		return Action{Name: s}, nil
	}
	var m map[string]int64
	if err := json.Unmarshal(raw, &m); err != nil || len(m) != 1 {
		return Action{}, errors.New("want an action name or {freeImageSpace: BYTES}")
	}
	b, ok := m["freeImageSpace"]
	if !ok || b < 0 {
		return Action{}, errors.New("want {freeImageSpace: BYTES} with BYTES >= 0")
	}
	return Action{Name: "freeImageSpace", Bytes: b}, nil
}

func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}

// criObject is a CRI message with an ID: an image or a container.
type criObject interface {
	proto.Message
	GetId() string
}

// criList decodes field, a JSON list of CRI objects of kind as crictl prints
// them, each with an id. An empty list gives an empty, non-nil slice.
func criList[T criObject](file, field, kind string, data json.RawMessage, newT func() T) ([]T, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		return nil, decode.Badf(file, "%s: want a list of CRI %ss", field, kind)
	}
	out := make([]T, 0, len(items))
	seen := make(map[string]int, len(items))
	for j, raw := range items {
		x := newT()
		if err := protojson.Unmarshal(raw, x); err != nil {
			return nil, decode.Badf(file, "%s[%d]: %s", field, j, decode.Escape(err.Error()))
		}
		if x.GetId() == "" {
			return nil, decode.Badf(file, "%s[%d]: %s has no id", field, j, kind)
		}
		// Two with one id (with or without "sha256:") would be merged by the
		// runtime's view; say so instead.
		id := strings.TrimPrefix(x.GetId(), "sha256:")
		if first, ok := seen[id]; ok {
			return nil, decode.Badf(file, "%s[%d].id: %s: duplicate of %s[%d]", field, j, decode.Quote(x.GetId()), field, first)
		}
		seen[id] = j
		out = append(out, x)
	}
	return out, nil
}

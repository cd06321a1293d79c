package config

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/nodekeeper/nodekeeper/eviction"
	inputs "github.com/nodekeeper/nodekeeper/internal/base/decode"
)

// DropInSuffix is the name suffix of the drop-in directory's configuration
// files; other files there are skipped (Config.SkippedDropIns).
const DropInSuffix = ".conf"

// Sources are where `nodekeeper run`'s configuration comes from, in the
// kubelet's order of precedence: the configuration file, then each drop-in
// file merged over it, then the command-line flags that set a field.
type Sources struct {
	// File is the configuration file (the kubelet's --config); "" starts from
	// the defaults.
	File string
	// DropInDir is the drop-in directory (the kubelet's --config-dir): its
	// files named *.conf, in its subdirectories too, are merged over File in
	// lexical order of their paths, each a KubeletConfiguration with
	// apiVersion and kind, as a JSON merge patch (RFC 7386): objects merge
	// key by key, lists and scalars replace, null removes. "" reads none; a
	// directory that does not exist is an error, as in the kubelet.
	DropInDir string
	// Flags override what the files set.
	Flags Flags
	// MaxFileSize is the largest file read, File and each drop-in, in bytes;
	// 0 means decode.DefaultMaxConfigSize (10 MiB).
	MaxFileSize int64
}

// Flags are the kubelet command-line flags that set a configuration field
// (the kubelet's flag precedence: a flag given wins over the files). A nil
// field, or a nil FeatureGates, was not given.
type Flags struct {
	ContainerRuntimeEndpoint *string // --container-runtime-endpoint (containerRuntimeEndpoint)
	ImageServiceEndpoint     *string // --image-service-endpoint (imageServiceEndpoint)
	PodManifestPath          *string // --pod-manifest-path (staticPodPath)
	SystemCgroups            *string // --system-cgroups (systemCgroups)
	KubeletCgroups           *string // --kubelet-cgroups (kubeletCgroups)
	// FeatureGates is --feature-gates, merged gate by gate over featureGates.
	FeatureGates map[string]bool
	// RuntimeCgroups is --runtime-cgroups, which has no field (Agent.RuntimeCgroups).
	RuntimeCgroups string
}

// flagFields names, for each field a flag sets, the flag.
var flagFields = map[string]string{
	"containerRuntimeEndpoint": "--container-runtime-endpoint",
	"imageServiceEndpoint":     "--image-service-endpoint",
	"staticPodPath":            "--pod-manifest-path",
	"systemCgroups":            "--system-cgroups",
	"kubeletCgroups":           "--kubelet-cgroups",
	"featureGates":             "--feature-gates",
}

// patch returns the fields the flags given set, as a merge patch.
func (f Flags) patch() map[string]any {
	p := map[string]any{}
	for field, v := range map[string]*string{
		"containerRuntimeEndpoint": f.ContainerRuntimeEndpoint,
		"imageServiceEndpoint":     f.ImageServiceEndpoint,
		"staticPodPath":            f.PodManifestPath,
		"systemCgroups":            f.SystemCgroups,
		"kubeletCgroups":           f.KubeletCgroups,
	} {
		if v != nil {
			p[field] = *v
		}
	}
	if f.FeatureGates != nil {
		p["featureGates"] = f.FeatureGates
	}
	return p
}

// ParseFeatureGates parses the kubelet's --feature-gates value: a
// comma-separated list of Name=bool ("A=true,B=false"); "" is none. An error
// names the entry.
func ParseFeatureGates(s string) (map[string]bool, error) {
	gates := map[string]bool{}
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, val, ok := strings.Cut(entry, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("feature gate %q: want Name=true or Name=false", entry)
		}
		b, err := strconv.ParseBool(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("feature gate %q: %q is not a boolean", entry, strings.TrimSpace(val))
		}
		gates[name] = b
	}
	return gates, nil
}

// LoadSources reads the configuration file and the drop-in files, merges
// them and the flags, then defaults and validates the result as Load does. A
// file that cannot be read is returned wrapped (errors.Is(err,
// fs.ErrNotExist) works); every problem with a file's content wraps
// ErrInvalid and names the file that set the field (a drop-in file, or the
// flag) with the field and the value. Config.File is Sources.File. A file
// larger than MaxFileSize, or a directory given as a file, is of class
// ErrInvalid too, naming the file (and the limit). LoadSources gives up when
// ctx ends, even while a read blocks (a FIFO without a writer), and returns
// ctx.Err().
func LoadSources(ctx context.Context, s Sources) (*Config, error) {
	limit := s.MaxFileSize
	if limit <= 0 {
		limit = inputs.DefaultMaxConfigSize
	}
	var base *layer
	if s.File != "" {
		data, err := readConfig(ctx, s.File, limit)
		if err != nil {
			return nil, err
		}
		base = &layer{name: s.File, data: data}
	}
	var dropIns []layer
	var skipped []string
	if s.DropInDir != "" {
		paths, skip, err := dropInFiles(s.DropInDir)
		if err != nil {
			return nil, err
		}
		skipped = skip
		for _, p := range paths {
			data, err := readConfig(ctx, p, limit)
			if err != nil {
				return nil, err
			}
			dropIns = append(dropIns, layer{name: p, data: data})
		}
	}
	c, err := build(base, dropIns, s.Flags)
	if err != nil {
		return nil, err
	}
	c.SkippedDropIns = skipped
	return c, nil
}

// readConfig reads one configuration file of at most limit bytes, under ctx.
func readConfig(ctx context.Context, path string, limit int64) ([]byte, error) {
	data, err := inputs.ReadFile(ctx, path, limit)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, inputs.ErrBadInput) {
			// Too large ("FILE: larger than the input size limit ...") or
			// a directory ("FILE: is a directory, want a file").
			return nil, invalidInput{err}
		}
		return nil, fmt.Errorf("load kubelet configuration: %w", err)
	}
	return data, nil
}

// dropInFiles lists the drop-in files under dir in lexical order, and the
// other files it skips.
func dropInFiles(dir string) (files, skipped []string, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			return nil
		case filepath.Ext(d.Name()) != DropInSuffix:
			skipped = append(skipped, path)
			return nil
		}
		files = append(files, path)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("kubelet drop-in directory %s: %w", dir, err)
	}
	return files, skipped, nil
}

// layer is one configuration file's content.
type layer struct {
	name string
	data []byte
}

// build merges the drop-ins and the flags over base (nil: the defaults),
// then resolves the result. Each layer is decoded strictly on its own first,
// so that an unknown field or a value of the wrong type names its file.
func build(base *layer, dropIns []layer, f Flags) (*Config, error) {
	name := ""
	merged, _ := json.Marshal(map[string]string{"apiVersion": apiVersion, "kind": kind})
	origin := map[string]string{} // top-level field → the drop-in file or flag that set it last
	if base != nil {
		name = base.name
		_, raw, err := decode(base.name, base.data)
		if err != nil {
			return nil, err
		}
		merged, _ = json.Marshal(raw)
	}
	for _, l := range dropIns {
		_, raw, err := decode(l.name, l.data)
		if err != nil {
			return nil, err
		}
		if merged, err = defaultEvictionHardBeforeMerge(merged, raw); err != nil {
			return nil, invalid(l.name, "%v", err)
		}
		patch, _ := json.Marshal(raw)
		if merged, err = jsonpatch.MergePatch(merged, patch); err != nil {
			return nil, invalid(l.name, "merge over the configuration: %v", err)
		}
		for key := range raw {
			if key != "apiVersion" && key != "kind" {
				origin[key] = l.name
			}
		}
	}
	if p := f.patch(); len(p) > 0 {
		patch, _ := json.Marshal(p)
		var err error
		if merged, err = jsonpatch.MergePatch(merged, patch); err != nil {
			return nil, fmt.Errorf("merge the command-line flags over the configuration: %w", err)
		}
		for key := range p {
			origin[key] = flagFields[key]
		}
	}
	kc, raw, err := decode(name, merged)
	if err != nil {
		return nil, err
	}
	c, err := resolve(name, kc, raw)
	if err != nil {
		if fe := (*fieldErr)(nil); errors.As(err, &fe) {
			if o, ok := origin[topField(fe.field)]; ok {
				fe.file = o
			}
		}
		return nil, err
	}
	c.File = name
	c.Agent.RuntimeCgroups = f.RuntimeCgroups
	order := []string{name} // the files in the order they were merged
	for _, l := range dropIns {
		order = append(order, l.name)
	}
	c.Warnings = warnings(name, order, c, raw, origin)
	return c, nil
}

// defaultEvictionHardBeforeMerge gives merged the default evictionHard when
// it has none and the drop-in sets one: the kubelet defaults the
// configuration file's evictionHard before it merges the drop-ins, so a
// drop-in's thresholds are merged over the default ones.
func defaultEvictionHardBeforeMerge(merged []byte, dropIn map[string]json.RawMessage) ([]byte, error) {
	if r, ok := dropIn["evictionHard"]; !ok || isNull(r) {
		return merged, nil
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(merged, &doc); err != nil {
		return nil, err
	}
	if r, ok := doc["evictionHard"]; ok && !isNull(r) {
		return merged, nil
	}
	doc["evictionHard"], _ = json.Marshal(eviction.DefaultHard())
	return json.Marshal(doc)
}

// topField is the top-level field of a field path such as
// evictionHard[memory.available] or authorization.mode.
func topField(path string) string {
	if i := strings.IndexAny(path, "[."); i >= 0 {
		return path[:i]
	}
	return path
}

// warnings lists, one line each: per file (in order, the merge order), the
// fields it sets last that nodekeeper ignores; the containerfs thresholds; the cgroups nodekeeper
// does not move processes into; the feature gates it does not act on (all
// but honouredGates).
func warnings(name string, order []string, c *Config, raw map[string]json.RawMessage, origin map[string]string) []string {
	var out []string
	byFile := map[string][]string{}
	for _, key := range slices.Sorted(maps.Keys(raw)) {
		if supported[key] || isNull(raw[key]) {
			continue
		}
		file := name
		if o, ok := origin[key]; ok {
			file = o
		}
		byFile[file] = append(byFile[file], key)
	}
	for _, file := range order {
		if keys := byFile[file]; len(keys) > 0 {
			out = append(out, fmt.Sprintf("%s: fields not supported by nodekeeper and ignored: %s", file, strings.Join(keys, ", ")))
		}
	}
	if derived := derivedThresholdFields(c.Kubelet); len(derived) > 0 {
		out = append(out, fmt.Sprintf("%s: %s: containerfs thresholds are derived from nodefs or imagefs; the configured values are ignored, as in the kubelet",
			name, strings.Join(derived, ", ")))
	}
	from := func(field string) string {
		if o, ok := origin[field]; ok {
			return o
		}
		return name
	}
	var cgroups []string
	for _, cg := range []struct{ field, v string }{
		{"systemCgroups", c.Agent.SystemCgroups}, {"kubeletCgroups", c.Agent.KubeletCgroups},
	} {
		if cg.v != "" {
			cgroups = append(cgroups, fmt.Sprintf("%s %q (%s)", cg.field, cg.v, from(cg.field)))
		}
	}
	if c.Agent.RuntimeCgroups != "" {
		cgroups = append(cgroups, fmt.Sprintf("--runtime-cgroups %q", c.Agent.RuntimeCgroups))
	}
	if len(cgroups) > 0 {
		out = append(out, strings.Join(cgroups, ", ")+": nodekeeper does not move processes into these cgroups; ignored")
	}
	var ignored []string
	for _, g := range slices.Sorted(maps.Keys(c.Agent.FeatureGates)) {
		if _, honoured := honouredGates[g]; !honoured {
			ignored = append(ignored, fmt.Sprintf("%s=%t", g, c.Agent.FeatureGates[g]))
		}
	}
	if len(ignored) > 0 {
		out = append(out, fmt.Sprintf("featureGates %s (%s): nodekeeper acts on no feature gate but %s and %s; ignored",
			strings.Join(ignored, ","), from("featureGates"), GateCrashLoopBackOffMax, GateReduceCrashLoopBackOffDecay))
	}
	return out
}

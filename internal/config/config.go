package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/imagegc"
	inputs "github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/internal/base/quantity"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// ErrInvalid is the class of every error caused by the content of a configuration
// file: malformed YAML or JSON, a wrong apiVersion or kind, an unknown field, a
// value of the wrong type or one that fails validation. Check it with errors.Is.
var ErrInvalid = errors.New("invalid configuration")

const (
	apiVersion = "kubelet.config.k8s.io/v1beta1"
	kind       = "KubeletConfiguration"
)

// defaultPodPidsLimit is the kubelet's podPidsLimit default: no limit. The
// other defaults come from the packages that own them (nodeapi.DefaultMaxPods,
// imagegc.DefaultPolicy, eviction's defaults).
const defaultPodPidsLimit int64 = -1

// defaultEnforceNodeAllocatable is the kubelet's enforceNodeAllocatable default.
func defaultEnforceNodeAllocatable() []string { return []string{"pods"} }

// supported lists the top-level fields nodekeeper reads. Any other
// KubeletConfiguration field set in a file is reported in Config.Warnings.
var supported = map[string]bool{
	"apiVersion":                       true,
	"kind":                             true,
	"evictionHard":                     true,
	"evictionSoft":                     true,
	"evictionSoftGracePeriod":          true,
	"evictionMinimumReclaim":           true,
	"evictionPressureTransitionPeriod": true,
	"evictionMaxPodGracePeriod":        true,
	"mergeDefaultEvictionSettings":     true,
	"enforceNodeAllocatable":           true,
	"localStorageCapacityIsolation":    true,
	"kubeReserved":                     true,
	"systemReserved":                   true,
	"maxPods":                          true,
	"imageGCHighThresholdPercent":      true,
	"imageGCLowThresholdPercent":       true,
	"imageMinimumGCAge":                true,
	"imageMaximumGCAge":                true,
	"staticPodPath":                    true,
	"containerRuntimeEndpoint":         true,
	"imageServiceEndpoint":             true,
	"podPidsLimit":                     true,
	"allowedUnsafeSysctls":             true,
	// The agent's fields (agent.go).
	"podCIDR":               true,
	"podLogsDir":            true,
	"address":               true,
	"readOnlyPort":          true,
	"cgroupDriver":          true,
	"cgroupRoot":            true,
	"cgroupsPerQOS":         true,
	"syncFrequency":         true,
	"fileCheckFrequency":    true,
	"runtimeRequestTimeout": true,
	"failCgroupV1":          true,
	"failSwapOn":            true,
	"memorySwap":            true,
	"singleProcessOOMKill":  true,
	"healthzBindAddress":    true,
	"healthzPort":           true,
	"oomScoreAdj":           true, // the agent's own, set by nodekeeper run
	"clusterDomain":         true,
	"crashLoopBackOff":      true,
	"serializeImagePulls":   true,
	"maxParallelImagePulls": true,
	// Accepted with a warning when set (sources.go): nodekeeper moves no
	// process into these cgroups and acts on no feature gate but
	// KubeletCrashLoopBackOffMax and ReduceDefaultCrashLoopBackOffDecay.
	"systemCgroups":  true,
	"kubeletCgroups": true,
	"featureGates":   true,
	// A cluster node's fields (cluster.go).
	"enableServer":              true,
	"port":                      true,
	"tlsCertFile":               true,
	"tlsPrivateKeyFile":         true,
	"tlsMinVersion":             true,
	"tlsCipherSuites":           true,
	"authentication":            true,
	"authorization":             true,
	"enableDebuggingHandlers":   true,
	"nodeStatusUpdateFrequency": true,
	"nodeStatusReportFrequency": true,
	"nodeLeaseDurationSeconds":  true,
	"registerNode":              true,
	"registerWithTaints":        true,
	"kubeAPIQPS":                true,
	"kubeAPIBurst":              true,
	"eventRecordQPS":            true,
	"eventBurst":                true,
	"enableProfilingHandler":    true, // served on the root-only unix socket
}

// enforceKeys are the values the kubelet accepts in enforceNodeAllocatable.
var enforceKeys = []string{"pods", "system-reserved", "kube-reserved",
	"system-reserved-compressible", "kube-reserved-compressible", "none"}

// reservable are the resources kubeReserved and systemReserved may hold.
var reservable = []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, "pid"}

// Config is a loaded, defaulted and validated kubelet configuration. It is a plain
// value: the caller owns it, and nothing in this package keeps or changes it.
type Config struct {
	// File is the path the configuration was loaded from (the name given to
	// Parse), "" for Default.
	File string
	// Kubelet is the decoded configuration with the kubelet's defaults applied to
	// every field nodekeeper uses. EvictionHard holds the effective hard
	// thresholds, after defaulting or merging. Unsupported fields are kept as
	// decoded, without defaults.
	Kubelet kubeletv1beta1.KubeletConfiguration
	// Eviction is the eviction manager's configuration.
	Eviction eviction.Config
	// KubeReserved and SystemReserved are the parsed kubeReserved and
	// systemReserved maps; nil when empty.
	KubeReserved, SystemReserved v1.ResourceList
	// MaxPods is maxPods, 110 by default.
	MaxPods int32
	// Agent holds the fields only `nodekeeper run` uses.
	Agent Agent
	// Cluster holds the fields `nodekeeper run --kubeconfig` uses.
	Cluster Cluster
	// Warnings names every field set in the file that nodekeeper does not support
	// and ignores (one entry per file: the configuration file, then each drop-in
	// that sets one), the containerfs thresholds, which are ignored as the
	// kubelet ignores them (one entry), the systemCgroups, kubeletCgroups and
	// --runtime-cgroups set (one entry) and the feature gates set that
	// nodekeeper does not act on (one entry).
	Warnings []string
	// SkippedDropIns are the files of the drop-in directory that are not
	// named *.conf, which LoadSources skips.
	SkippedDropIns []string
}

// Parse decodes, defaults and validates the configuration data read from
// name (LoadSources reads the files). Every problem wraps ErrInvalid and
// names the file, the field and the value; name is also Config.File.
func Parse(name string, data []byte) (*Config, error) {
	return build(&layer{name: name, data: data}, nil, Flags{})
}

// derivedThresholdFields names the containerfs entries of the eviction maps.
func derivedThresholdFields(kc kubeletv1beta1.KubeletConfiguration) []string {
	var out []string
	for _, m := range []struct {
		field string
		m     map[string]string
	}{
		{"evictionHard", kc.EvictionHard}, {"evictionSoft", kc.EvictionSoft},
		{"evictionSoftGracePeriod", kc.EvictionSoftGracePeriod}, {"evictionMinimumReclaim", kc.EvictionMinimumReclaim},
	} {
		for key := range m.m {
			if eviction.IsDerived(eviction.Signal(key)) {
				out = append(out, m.field+"["+key+"]")
			}
		}
	}
	slices.Sort(out)
	return out
}

// Default returns the configuration of a file that sets only apiVersion and kind.
func Default() *Config {
	kc := kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
	}
	c, err := resolve("", kc, nil)
	if err != nil {
		panic("config: the defaults do not validate: " + err.Error()) // programmer error
	}
	return c
}

// invalid returns an error of class ErrInvalid about file.
func invalid(file, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", file, ErrInvalid, fmt.Sprintf(format, args...))
}

// invalidInput is an input error (decode.ErrBadInput) that is also of class
// ErrInvalid, with its text unchanged.
type invalidInput struct{ error }

func (e invalidInput) Unwrap() error        { return e.error }
func (e invalidInput) Is(target error) bool { return target == ErrInvalid }

// fieldError returns an error of class ErrInvalid naming field and value, in the
// same form as eviction.FieldError.
func fieldError(file, field, value, reason string) error {
	return &fieldErr{file: file, field: field, value: value, reason: reason}
}

// fieldErr is an error of class ErrInvalid about one field's value. file is
// where the value came from: when drop-in files or flags are merged over the
// file, LoadSources names the one that last set the field.
type fieldErr struct {
	file, field, value, reason string
	cause                      error // the *eviction.FieldError it comes from, or nil
}

func (e *fieldErr) Error() string {
	return fmt.Sprintf("%s: %v: %s: %q: %s", e.file, ErrInvalid, e.field, e.value, e.reason)
}
func (e *fieldErr) Is(target error) bool { return target == ErrInvalid }
func (e *fieldErr) Unwrap() error        { return e.cause }

// decode turns YAML or JSON into a KubeletConfiguration, strictly (package
// decode: the rule every input shares). It also returns the file's top-level
// keys with their raw JSON values.
func decode(name string, data []byte) (kubeletv1beta1.KubeletConfiguration, map[string]json.RawMessage, error) {
	var kc kubeletv1beta1.KubeletConfiguration
	js, err := inputs.ToJSON(data)
	if errors.Is(err, inputs.ErrSyntax) {
		return kc, nil, invalid(name, "malformed YAML or JSON: %v", err)
	}
	if err != nil {
		return kc, nil, invalid(name, "%v", err) // a value YAML reads unlike it looks, with its field
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return kc, nil, invalid(name, "not a %s object: %v", kind, describeJSONError(err))
	}
	var head struct {
		APIVersion any `json:"apiVersion"`
		Kind       any `json:"kind"`
	}
	_ = json.Unmarshal(js, &head) // cannot fail: js is an object
	if head.APIVersion != apiVersion || head.Kind != kind {
		return kc, nil, invalid(name, "apiVersion %s, kind %s: want apiVersion %s, kind %s",
			shownJSON(raw["apiVersion"]), shownJSON(raw["kind"]), apiVersion, kind)
	}
	fields, err := inputs.StrictFields(js, &kc)
	if err != nil {
		// Name the field whose value is wrong: decode each key on its own.
		for _, key := range slices.Sorted(maps.Keys(raw)) {
			one, _ := json.Marshal(map[string]json.RawMessage{key: raw[key]})
			if _, err := inputs.StrictFields(one, new(kubeletv1beta1.KubeletConfiguration)); err != nil {
				if ferr := stringMapError(name, key, raw[key]); ferr != nil {
					return kc, nil, ferr
				}
				if ve := (*inputs.ValueError)(nil); errors.As(err, &ve) && ve.Path == key {
					return kc, nil, fieldError(name, key, shown(raw[key]), ve.Reason)
				}
				return kc, nil, fieldError(name, key, shown(raw[key]), err.Error())
			}
		}
		return kc, nil, invalid(name, "%v", err)
	}
	var unknown, other []string
	for _, f := range fields {
		if path, ok := strings.CutPrefix(f.Error(), "unknown field "); ok {
			unknown = append(unknown, path)
		} else {
			other = append(other, f.Error()) // duplicate field "..."
		}
	}
	switch {
	case len(other) > 0:
		return kc, nil, invalid(name, "%s", strings.Join(other, ", "))
	case len(unknown) > 0:
		slices.Sort(unknown)
		return kc, nil, invalid(name, "unknown fields %s: not %s fields", strings.Join(unknown, ", "), kind)
	}
	return kc, raw, nil
}

// stringMapError names the entry of an object that is not a string, for the
// map[string]string fields (evictionHard, kubeReserved, ...), where YAML users
// often leave a number unquoted. It returns nil for anything else.
func stringMapError(file, key string, r json.RawMessage) error {
	var m map[string]json.RawMessage
	if json.Unmarshal(r, &m) != nil {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		var s string
		if !isNull(m[k]) && json.Unmarshal(m[k], &s) != nil {
			return fieldError(file, key+"["+k+"]", shown(m[k]), "must be a string; quote it")
		}
	}
	return nil
}

// describeJSONError rewords encoding/json errors without the Go type internals
// that mean nothing to someone editing a YAML file.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		msg := fmt.Sprintf("cannot use a JSON %s as %s", te.Value, te.Type)
		if te.Field != "" {
			msg += " (field " + te.Field + ")"
		}
		return msg
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func isNull(r json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(r), []byte("null")) }

// shown renders a raw JSON value for an error message: a string without its
// quotes, anything else as compact JSON, cut to a readable length.
func shown(r json.RawMessage) string {
	var s string
	if json.Unmarshal(r, &s) != nil {
		var buf bytes.Buffer
		if json.Compact(&buf, r) == nil {
			s = buf.String()
		} else {
			s = string(r)
		}
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// shownJSON quotes shown(r), or says the key is missing.
func shownJSON(r json.RawMessage) string {
	if r == nil {
		return "missing"
	}
	return strconv.Quote(shown(r))
}

// valueOf renders the value of key as written in the file, or fallback when the
// file does not set it (defaults, or a configuration built by Default).
func valueOf(raw map[string]json.RawMessage, key, fallback string) string {
	if r, ok := raw[key]; ok {
		return shown(r)
	}
	return fallback
}

// resolve applies defaults to kc, validates it and derives the Config. raw holds
// the file's values, used only to quote them in errors.
func resolve(name string, kc kubeletv1beta1.KubeletConfiguration, raw map[string]json.RawMessage) (*Config, error) {
	imageDefaults := imagegc.DefaultPolicy()
	k := kc
	fail := func(field, fallback, reason string) error {
		return fieldError(name, field, valueOf(raw, field, fallback), reason)
	}

	// Eviction.
	if k.MergeDefaultEvictionSettings == nil {
		k.MergeDefaultEvictionSettings = new(false)
	}
	switch {
	case k.EvictionHard == nil:
		k.EvictionHard = eviction.DefaultHard()
	case *k.MergeDefaultEvictionSettings:
		merged := eviction.DefaultHard()
		maps.Copy(merged, k.EvictionHard) // the file's values win
		k.EvictionHard = merged
	}
	// evictionSoft, evictionSoftGracePeriod and evictionMinimumReclaim have no
	// defaults, so merging adds nothing to them.
	if k.EnforceNodeAllocatable == nil {
		k.EnforceNodeAllocatable = defaultEnforceNodeAllocatable()
	}
	for i, key := range k.EnforceNodeAllocatable {
		field := fmt.Sprintf("enforceNodeAllocatable[%d]", i)
		if !slices.Contains(enforceKeys, key) {
			return nil, fieldError(name, field, key, "unknown value; want one of "+strings.Join(enforceKeys, ", "))
		}
		if key == "none" && len(k.EnforceNodeAllocatable) > 1 {
			return nil, fieldError(name, field, key, "none cannot be combined with other values")
		}
	}
	thresholds, err := eviction.ParseThresholds(eviction.ThresholdConfig{
		Hard:                   k.EvictionHard,
		Soft:                   k.EvictionSoft,
		SoftGracePeriod:        k.EvictionSoftGracePeriod,
		MinimumReclaim:         k.EvictionMinimumReclaim,
		EnforceNodeAllocatable: k.EnforceNodeAllocatable,
	})
	if err != nil {
		if fe := (*eviction.FieldError)(nil); errors.As(err, &fe) {
			return nil, &fieldErr{file: name, field: fe.Field, value: fe.Value, reason: fe.Reason, cause: err}
		}
		return nil, fmt.Errorf("%s: %w: %w", name, ErrInvalid, err)
	}
	if err := checkThresholdRange(name, k); err != nil {
		return nil, err
	}
	switch d := k.EvictionPressureTransitionPeriod.Duration; {
	case d < 0:
		return nil, fail("evictionPressureTransitionPeriod", d.String(), "must not be negative")
	case d == 0:
		k.EvictionPressureTransitionPeriod.Duration = eviction.DefaultPressureTransitionPeriod
	}
	if g := k.EvictionMaxPodGracePeriod; g < 0 {
		return nil, fail("evictionMaxPodGracePeriod", strconv.Itoa(int(g)), "must not be negative")
	}
	if k.LocalStorageCapacityIsolation == nil {
		k.LocalStorageCapacityIsolation = new(true)
	}

	// Pods.
	switch {
	case k.MaxPods < 0:
		return nil, fail("maxPods", strconv.Itoa(int(k.MaxPods)), "must not be negative")
	case k.MaxPods == 0:
		k.MaxPods = nodeapi.DefaultMaxPods
	}
	if k.PodPidsLimit == nil {
		k.PodPidsLimit = new(defaultPodPidsLimit)
	}

	// Image garbage collection.
	if k.ImageGCHighThresholdPercent == nil {
		k.ImageGCHighThresholdPercent = new(int32(imageDefaults.HighThresholdPercent))
	}
	if k.ImageGCLowThresholdPercent == nil {
		k.ImageGCLowThresholdPercent = new(int32(imageDefaults.LowThresholdPercent))
	}
	high, low := *k.ImageGCHighThresholdPercent, *k.ImageGCLowThresholdPercent
	for _, p := range []struct {
		field string
		v     int32
	}{{"imageGCHighThresholdPercent", high}, {"imageGCLowThresholdPercent", low}} {
		if p.v < 0 || p.v > 100 {
			return nil, fail(p.field, strconv.Itoa(int(p.v)), "must be between 0 and 100")
		}
	}
	if low > high {
		return nil, fail("imageGCLowThresholdPercent", strconv.Itoa(int(low)),
			fmt.Sprintf("must not be greater than imageGCHighThresholdPercent (%d)", high))
	}
	switch d := k.ImageMinimumGCAge.Duration; {
	case d < 0:
		return nil, fail("imageMinimumGCAge", d.String(), "must not be negative")
	case d == 0:
		k.ImageMinimumGCAge.Duration = imageDefaults.MinAge
	}
	switch maxAge := k.ImageMaximumGCAge.Duration; {
	case maxAge < 0:
		return nil, fail("imageMaximumGCAge", maxAge.String(), "must not be negative")
	case maxAge != 0 && maxAge <= k.ImageMinimumGCAge.Duration:
		return nil, fail("imageMaximumGCAge", maxAge.String(),
			fmt.Sprintf("must be 0 (disabled) or greater than imageMinimumGCAge (%s)", k.ImageMinimumGCAge.Duration))
	}

	// Reserved resources.
	kubeReserved, err := parseReserved(name, "kubeReserved", k.KubeReserved)
	if err != nil {
		return nil, err
	}
	systemReserved, err := parseReserved(name, "systemReserved", k.SystemReserved)
	if err != nil {
		return nil, err
	}

	agent, err := resolveAgent(name, &k, raw)
	if err != nil {
		return nil, err
	}
	cluster, err := resolveCluster(name, &k, raw)
	if err != nil {
		return nil, err
	}
	if err := checkListeners(name, agent, cluster, raw); err != nil {
		return nil, err
	}

	return &Config{
		Agent:   agent,
		Cluster: cluster,
		Kubelet: k,
		Eviction: eviction.Config{
			Thresholds:                    thresholds,
			PressureTransitionPeriod:      k.EvictionPressureTransitionPeriod.Duration,
			MaxPodGracePeriod:             time.Duration(k.EvictionMaxPodGracePeriod) * time.Second,
			MonitoringInterval:            eviction.DefaultMonitoringInterval,
			LocalStorageCapacityIsolation: *k.LocalStorageCapacityIsolation,
			PodCleanupTimeout:             eviction.DefaultPodCleanupTimeout,
		},
		KubeReserved:   kubeReserved,
		SystemReserved: systemReserved,
		MaxPods:        k.MaxPods,
	}, nil
}

// parseReserved parses a kubeReserved or systemReserved map.
func parseReserved(file, field string, m map[string]string) (v1.ResourceList, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(v1.ResourceList, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		val := m[name]
		f := field + "[" + name + "]"
		if !slices.Contains(reservable, v1.ResourceName(name)) {
			return nil, fieldError(file, f, val, "cannot reserve this resource; want cpu, memory, ephemeral-storage or pid")
		}
		q, err := quantity.Parse(strings.TrimSpace(val))
		if err != nil {
			return nil, fieldError(file, f, val, "not a valid quantity")
		}
		if q.Sign() < 0 {
			return nil, fieldError(file, f, val, "must not be negative")
		}
		if !quantity.FitsInt64(name, q) {
			return nil, fieldError(file, f, val, "too large")
		}
		out[v1.ResourceName(name)] = q
	}
	return out, nil
}

// checkThresholdRange rejects the eviction quantities (evictionHard,
// evictionSoft, evictionMinimumReclaim) that do not fit the int64 the eviction
// manager compares them in: bytes, inodes or process counts. The values have
// already been parsed by eviction.ParseThresholds, so each one is valid.
func checkThresholdRange(file string, k kubeletv1beta1.KubeletConfiguration) error {
	for _, m := range []struct {
		field string
		m     map[string]string
	}{
		{"evictionHard", k.EvictionHard}, {"evictionSoft", k.EvictionSoft},
		{"evictionMinimumReclaim", k.EvictionMinimumReclaim},
	} {
		for _, key := range slices.Sorted(maps.Keys(m.m)) {
			val := strings.TrimSpace(m.m[key])
			if strings.HasSuffix(val, "%") {
				continue
			}
			if q, err := quantity.Parse(val); err == nil && !quantity.FitsInt64(key, q) {
				return fieldError(file, m.field+"["+key+"]", m.m[key], "too large")
			}
		}
	}
	return nil
}

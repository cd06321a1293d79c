package config

import (
	"encoding/json"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// The kubelet's defaults of the fields a node in a cluster uses.
const (
	defaultPort                      = 10250
	defaultNodeStatusUpdateFrequency = 10 * time.Second
	defaultNodeStatusReportFrequency = 5 * time.Minute
	defaultNodeLeaseDurationSeconds  = 40
	defaultAuthnCacheTTL             = 2 * time.Minute
	defaultAuthzAuthorizedTTL        = 5 * time.Minute
	defaultAuthzUnauthorizedTTL      = 30 * time.Second
	defaultKubeAPIQPS                = 50
	defaultKubeAPIBurst              = 100
	defaultEventRecordQPS            = 50
	defaultEventBurst                = 100
)

// Cluster holds the resolved fields a node joined to an API server uses: its
// secured server (the kubelet API on port 10250), its Node object and Lease,
// and its API client's rate limits.
type Cluster struct {
	// EnableServer serves the kubelet API on Port over TLS.
	EnableServer bool
	// Address is where the secured server listens: the configured address,
	// else 0.0.0.0 as the kubelet's (the read-only port's default is
	// loopback, see Agent.Address).
	Address string
	Port    int32
	// TLSCertFile and TLSPrivateKeyFile are the serving certificate; both
	// empty means a self-signed one kept under the root directory.
	TLSCertFile, TLSPrivateKeyFile string
	// Authentication and Authorization are the kubelet's, defaulted.
	Authentication kubeletv1beta1.KubeletAuthentication
	Authorization  kubeletv1beta1.KubeletAuthorization
	// EnableDebuggingHandlers serves logs, exec, attach and port-forward.
	EnableDebuggingHandlers bool
	// NodeStatusUpdateFrequency is how often the node status is computed
	// (and written when it changed); NodeStatusReportFrequency the longest
	// time between two writes.
	NodeStatusUpdateFrequency, NodeStatusReportFrequency time.Duration
	// NodeLeaseDurationSeconds is the Lease's duration.
	NodeLeaseDurationSeconds int32
	// RegisterNode creates the Node object; RegisterWithTaints are its taints
	// at registration.
	RegisterNode       bool
	RegisterWithTaints []v1.Taint
	// KubeAPIQPS and KubeAPIBurst limit the API client; EventRecordQPS and
	// EventBurst the events it sends (QPS 0: no limit).
	KubeAPIQPS, KubeAPIBurst   int32
	EventRecordQPS, EventBurst int32
}

// resolveCluster defaults and validates the cluster fields of k in place, as
// the kubelet defaults them, and returns them resolved.
func resolveCluster(name string, k *kubeletv1beta1.KubeletConfiguration, raw map[string]json.RawMessage) (Cluster, error) {
	fail := func(field, value, reason string) (Cluster, error) {
		return Cluster{}, fieldError(name, field, value, reason)
	}
	orTrue := func(b **bool) bool {
		if *b == nil {
			*b = new(true)
		}
		return **b
	}
	if _, set := raw["port"]; !set {
		k.Port = defaultPort
	}
	if k.Port < 1 || k.Port > 65535 {
		return fail("port", strconv.Itoa(int(k.Port)), "must be between 1 and 65535")
	}
	if (k.TLSCertFile == "") != (k.TLSPrivateKeyFile == "") {
		return fail("tlsCertFile", k.TLSCertFile, "tlsCertFile and tlsPrivateKeyFile are set together or not at all")
	}
	an := &k.Authentication
	if an.Anonymous.Enabled == nil {
		an.Anonymous.Enabled = new(false)
	}
	orTrue(&an.Webhook.Enabled)
	az := &k.Authorization
	switch az.Mode {
	case "":
		az.Mode = kubeletv1beta1.KubeletAuthorizationModeWebhook
	case kubeletv1beta1.KubeletAuthorizationModeWebhook, kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow:
	default:
		return fail("authorization.mode", string(az.Mode), "want Webhook or AlwaysAllow")
	}
	_, updateSet := raw["nodeStatusUpdateFrequency"]
	durations := []struct {
		field string
		v     *metav1.Duration
		def   time.Duration
	}{
		{"authentication.webhook.cacheTTL", &an.Webhook.CacheTTL, defaultAuthnCacheTTL},
		{"authorization.webhook.cacheAuthorizedTTL", &az.Webhook.CacheAuthorizedTTL, defaultAuthzAuthorizedTTL},
		{"authorization.webhook.cacheUnauthorizedTTL", &az.Webhook.CacheUnauthorizedTTL, defaultAuthzUnauthorizedTTL},
		{"nodeStatusUpdateFrequency", &k.NodeStatusUpdateFrequency, defaultNodeStatusUpdateFrequency},
		{"nodeStatusReportFrequency", &k.NodeStatusReportFrequency, defaultNodeStatusReportFrequency},
	}
	for _, d := range durations {
		if d.v.Duration < 0 {
			return fail(d.field, d.v.Duration.String(), "must not be negative")
		}
		if d.v.Duration == 0 {
			d.v.Duration = d.def
			// The kubelet's backward compatibility: an explicit update
			// frequency is also the report frequency unless that is set.
			if d.field == "nodeStatusReportFrequency" && updateSet {
				d.v.Duration = k.NodeStatusUpdateFrequency.Duration
			}
		}
	}
	if k.NodeLeaseDurationSeconds == 0 {
		k.NodeLeaseDurationSeconds = defaultNodeLeaseDurationSeconds
	}
	if k.NodeLeaseDurationSeconds < 0 {
		return fail("nodeLeaseDurationSeconds", strconv.Itoa(int(k.NodeLeaseDurationSeconds)), "must be greater than 0")
	}
	if k.KubeAPIQPS == nil {
		k.KubeAPIQPS = new(int32(defaultKubeAPIQPS))
	}
	if _, set := raw["kubeAPIBurst"]; !set {
		k.KubeAPIBurst = defaultKubeAPIBurst
	}
	if k.EventRecordQPS == nil {
		k.EventRecordQPS = new(int32(defaultEventRecordQPS))
	}
	if _, set := raw["eventBurst"]; !set {
		k.EventBurst = defaultEventBurst
	}
	for _, n := range []struct {
		field string
		v     int32
	}{{"kubeAPIQPS", *k.KubeAPIQPS}, {"kubeAPIBurst", k.KubeAPIBurst}, {"eventRecordQPS", *k.EventRecordQPS}, {"eventBurst", k.EventBurst}} {
		if n.v < 0 {
			return fail(n.field, strconv.Itoa(int(n.v)), "must not be negative")
		}
	}
	for i, t := range k.RegisterWithTaints {
		switch {
		case t.Key == "":
			return fail("registerWithTaints["+strconv.Itoa(i)+"].key", "", "must not be empty")
		case t.Effect != v1.TaintEffectNoSchedule && t.Effect != v1.TaintEffectPreferNoSchedule && t.Effect != v1.TaintEffectNoExecute:
			return fail("registerWithTaints["+strconv.Itoa(i)+"].effect", string(t.Effect), "want NoSchedule, PreferNoSchedule or NoExecute")
		}
	}
	address := "0.0.0.0"
	if _, set := raw["address"]; set && k.Address != "" {
		address = k.Address
	}
	return Cluster{
		EnableServer:              orTrue(&k.EnableServer),
		Address:                   address,
		Port:                      k.Port,
		TLSCertFile:               k.TLSCertFile,
		TLSPrivateKeyFile:         k.TLSPrivateKeyFile,
		Authentication:            *an,
		Authorization:             *az,
		EnableDebuggingHandlers:   orTrue(&k.EnableDebuggingHandlers),
		NodeStatusUpdateFrequency: k.NodeStatusUpdateFrequency.Duration,
		NodeStatusReportFrequency: k.NodeStatusReportFrequency.Duration,
		NodeLeaseDurationSeconds:  k.NodeLeaseDurationSeconds,
		RegisterNode:              orTrue(&k.RegisterNode),
		RegisterWithTaints:        k.RegisterWithTaints,
		KubeAPIQPS:                *k.KubeAPIQPS,
		KubeAPIBurst:              k.KubeAPIBurst,
		EventRecordQPS:            *k.EventRecordQPS,
		EventBurst:                k.EventBurst,
	}, nil
}

// Package kubenode keeps the node's Node object and its Lease on a Kubernetes
// API server, as the kubelet does: it registers the Node (or adopts the one
// already there), computes the node's status every StatusUpdateFrequency and
// writes it when it changed or StatusReportFrequency has passed, and renews
// the node's Lease in kube-node-lease every quarter of its duration.
//
// It works with the rights of a kubelet under the Node authorizer and the
// NodeRestriction admission plugin: it creates and patches only its own Node,
// and creates and updates only its own Lease.
package kubenode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// Defaults of the Config fields left zero: the kubelet's.
const (
	DefaultStatusUpdateFrequency = 10 * time.Second
	DefaultStatusReportFrequency = 5 * time.Minute
	DefaultLeaseDurationSeconds  = 40
	// leaseRenewFraction is the part of the lease duration between renewals.
	leaseRenewFraction = 0.25
	// Registration retries back off from firstBackoff, doubling up to
	// maxBackoff.
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 7 * time.Second
)

// Config is what the controller reports and how often.
type Config struct {
	// NodeName names the Node and its Lease. Required.
	NodeName string
	// Hostname is the kubernetes.io/hostname label and the Hostname
	// address; "" is NodeName.
	Hostname string
	// NodeIP, when set, is the node's InternalIP address (HostIP picks it
	// as the kubelet does); loopback, link-local, multicast and unspecified
	// addresses are refused.
	NodeIP string
	// Labels are added to the default labels at registration (the kubelet's
	// --node-labels); they win over the defaults. Under NodeRestriction a
	// node may only set the kubelet's allowed labels.
	Labels map[string]string
	// RegisterWithTaints are the Node's taints at registration
	// (KubeletConfiguration registerWithTaints). An existing Node's taints
	// are left alone.
	RegisterWithTaints []v1.Taint
	// KubeletPort is status.daemonEndpoints.kubeletEndpoint.port.
	KubeletPort int32
	// SystemInfo is status.nodeInfo (ReadSystemInfo, with
	// ContainerRuntimeVersion from the runtime's CRI Version, e.g.
	// "containerd://1.6.20"); KubeletVersion, OperatingSystem and
	// Architecture are set by the controller.
	SystemInfo v1.NodeSystemInfo
	// Version is nodekeeper's version, reported as kubeletVersion.
	Version string
	// StatusUpdateFrequency is how often the status is computed (the
	// kubelet's nodeStatusUpdateFrequency).
	StatusUpdateFrequency time.Duration
	// StatusReportFrequency is how long an unchanged status goes unwritten
	// (nodeStatusReportFrequency).
	StatusReportFrequency time.Duration
	// LeaseDurationSeconds is the Lease's leaseDurationSeconds
	// (nodeLeaseDurationSeconds); the Lease is renewed every quarter of it.
	LeaseDurationSeconds int32
}

// Client is the part of the API client the controller uses;
// kubeclient.Interface implements it.
type Client interface {
	Nodes() kubeclient.NodeInterface
	Leases(namespace string) kubeclient.LeaseInterface
}

// Deps are the controller's collaborators.
type Deps struct {
	// Client talks to the API server as the node. Required. Give it a
	// request timeout (the kubelet uses StatusUpdateFrequency for its
	// heartbeat client): the status patch does not follow Run's context.
	Client Client
	// Status returns the node's status at now: capacity, allocatable and
	// the conditions (internal/core/node's Object). It is called from Run's
	// goroutine only. Required.
	Status func(now time.Time) (*v1.Node, error)
	// WatchClient is the client the watch of the Node uses: one without a
	// short request timeout, since a watch lasts minutes (the kubelet's
	// informers use its main client, not the heartbeat one). Nil: Client.
	WatchClient Client
	// Logger receives the controller's logs and the Lease renewer's; nil
	// discards them.
	Logger *slog.Logger
	// OnRepeatedHeartbeatFailure, when set, is called when a Lease renewal
	// fails more than once in a row (the kubelet closes its client's
	// connections there). It is called from the lease goroutine.
	OnRepeatedHeartbeatFailure func()
	// Recorder, when set, gets the node's events: Starting when Run
	// starts, and one event per condition whose status a write changed
	// (NodeReady, NodeHasDiskPressure, ...), as the kubelet records them.
	Recorder nodeapi.Recorder
}

// Controller keeps the Node and its Lease. Its methods are safe for
// concurrent use; Run is called once.
type Controller struct {
	cfg   Config
	deps  Deps
	log   *slog.Logger
	pokeC chan struct{} // capacity 1: a pending Poke
	// uid is the registered Node's UID, the Lease's owner; set by Run's
	// goroutine, read by the lease goroutine.
	uid atomic.Pointer[types.UID]
	// node is the newest Node the API server returned, to a status write
	// or through watch (for Node).
	node atomic.Pointer[v1.Node]
	// watch is the informer over this node's Node object alone, as the
	// kubelet's node informer: a label or taint another client sets
	// reaches Node within the watch's latency, not at the next status
	// write. Run runs it.
	watch cache.SharedIndexInformer
}

// Node returns the newest Node the API server has returned, to the status
// writes or through the watch of the Node (its labels and taints are what
// admission's node-affinity and taint checks read), or nil before the Node
// is known. It may be called from any goroutine; the Node must not be
// modified.
func (c *Controller) Node() *v1.Node { return c.node.Load() }

// observe keeps n as the Node unless the one kept is newer (a watch event
// can arrive after the answer to a later status write).
func (c *Controller) observe(n *v1.Node) {
	for {
		old := c.node.Load()
		if old != nil && olderVersion(n.ResourceVersion, old.ResourceVersion) {
			return
		}
		if c.node.CompareAndSwap(old, n) {
			return
		}
	}
}

// olderVersion reports whether resource version a is older than b. The API
// server's versions are opaque strings; etcd's are increasing integers, and
// anything else counts as not older (the last one seen wins).
func olderVersion(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x < y
}

// newWatch returns the informer over the Node named name: list and watch
// with a field selector on its name, managed fields dropped, every add and
// update observed.
func (c *Controller) newWatch(name string) (cache.SharedIndexInformer, error) {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	client := c.deps.WatchClient
	if client == nil {
		client = c.deps.Client
	}
	nodes := client.Nodes()
	// A client that says it cannot serve watch-list (client-go's fake, in
	// tests) is listed and watched the old way.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return nodes.Watch(ctx, o)
		},
	}, client), &v1.Node{}, 0, cache.Indexers{})
	if err := inf.SetTransform(func(obj any) (any, error) {
		if n, ok := obj.(*v1.Node); ok {
			n.ManagedFields = nil
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	seen := func(obj any) {
		if n, ok := obj.(*v1.Node); ok && n.Name == name {
			c.observe(n)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		return nil, err
	}
	return inf, nil
}

// New validates cfg, fills its defaults and returns the controller.
func New(cfg Config, deps Deps) (*Controller, error) {
	if deps.Client == nil || deps.Status == nil {
		return nil, errors.New("kubenode: Client and Status are required")
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("kubenode: %w", err)
	}
	c := &Controller{cfg: cfg, deps: deps, log: deps.Logger, pokeC: make(chan struct{}, 1)}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("subsystem", "kubenode", "node", cfg.NodeName)
	w, err := c.newWatch(cfg.NodeName)
	if err != nil {
		return nil, fmt.Errorf("kubenode: %w", err)
	}
	c.watch = w
	c.cfg.Hostname = strings.ToLower(c.cfg.Hostname)
	if c.cfg.Hostname == "" {
		c.cfg.Hostname = cfg.NodeName
	}
	if c.cfg.StatusUpdateFrequency == 0 {
		c.cfg.StatusUpdateFrequency = DefaultStatusUpdateFrequency
	}
	if c.cfg.StatusReportFrequency == 0 {
		c.cfg.StatusReportFrequency = DefaultStatusReportFrequency
	}
	if c.cfg.LeaseDurationSeconds == 0 {
		c.cfg.LeaseDurationSeconds = DefaultLeaseDurationSeconds
	}
	return c, nil
}

// validate checks the fields a bad configuration can get wrong, naming the
// field and the value.
func (c *Config) validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(c.NodeName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("node name %q: %s", c.NodeName, strings.Join(msgs, "; ")))
	}
	if c.NodeIP != "" {
		if ip := net.ParseIP(c.NodeIP); ip == nil {
			errs = append(errs, fmt.Errorf("node IP %q is not an IP address", c.NodeIP))
		} else if err := checkNodeIP(ip); err != nil {
			errs = append(errs, fmt.Errorf("node IP %q: %w, which a node may not report", c.NodeIP, err))
		}
	}
	for k, v := range c.Labels {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("node label key %q: %s", k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("node label %q value %q: %s", k, v, strings.Join(msgs, "; ")))
		}
	}
	for i, t := range c.RegisterWithTaints {
		if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("registerWithTaints[%d].key %q: %s", i, t.Key, strings.Join(msgs, "; ")))
		}
		switch t.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			errs = append(errs, fmt.Errorf("registerWithTaints[%d].effect %q: not NoSchedule, PreferNoSchedule or NoExecute", i, t.Effect))
		}
	}
	if c.KubeletPort < 0 || c.KubeletPort > 65535 {
		errs = append(errs, fmt.Errorf("kubelet port %d: not a port", c.KubeletPort))
	}
	if c.StatusUpdateFrequency < 0 {
		errs = append(errs, fmt.Errorf("nodeStatusUpdateFrequency %v: negative", c.StatusUpdateFrequency))
	}
	if c.StatusReportFrequency < 0 {
		errs = append(errs, fmt.Errorf("nodeStatusReportFrequency %v: negative", c.StatusReportFrequency))
	}
	if c.LeaseDurationSeconds < 0 {
		errs = append(errs, fmt.Errorf("nodeLeaseDurationSeconds %d: negative", c.LeaseDurationSeconds))
	}
	return errors.Join(errs...)
}

// Poke asks Run to compute the status now and write it if it changed (the
// daemon calls it when a pressure condition changes). It never blocks; pokes
// before the next computation coalesce.
func (c *Controller) Poke() {
	select {
	case c.pokeC <- struct{}{}:
	default:
	}
}

// state is what Run's goroutine knows of the Node; only it touches it.
type state struct {
	node       *v1.Node  // as last read from or written to the API server; nil until registered
	lastReport time.Time // of the last status write; zero forces one
}

// Run registers the Node, retrying with back-off while the API server is
// unreachable or refuses, then keeps its status and Lease until ctx ends.
// Errors from the API server are logged and retried, never returned: Run
// returns nil when ctx ends, after its goroutines have.
func (c *Controller) Run(ctx context.Context) error {
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(c.log.Handler()))
	if c.deps.Recorder != nil {
		c.deps.Recorder.Eventf(nodeapi.NodeRef(c.cfg.NodeName), v1.EventTypeNormal, "Starting", "Starting kubelet.")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { c.watch.RunWithContext(ctx) })
	var st state
	leaseStarted := false
	backoff := firstBackoff
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.pokeC:
			if st.node != nil {
				c.syncStatus(ctx, &st)
			}
			continue
		case <-timer.C:
		}
		if st.node == nil {
			if !c.register(ctx, &st) {
				if ctx.Err() != nil {
					return nil
				}
				c.log.Info("Will retry registering the node", "after", backoff)
				timer.Reset(backoff)
				backoff = min(2*backoff, maxBackoff)
				continue
			}
			backoff = firstBackoff
			if !leaseStarted {
				leaseStarted = true
				lc := c.leaseController()
				wg.Go(func() { lc.Run(ctx) })
			}
		}
		c.syncStatus(ctx, &st)
		timer.Reset(c.cfg.StatusUpdateFrequency)
	}
}

// register creates the Node or adopts the existing one, and reports whether
// st now holds it.
func (c *Controller) register(ctx context.Context, st *state) bool {
	now := time.Now()
	src, err := c.deps.Status(now)
	if err != nil {
		c.log.Error("Unable to compute the node's status for registration", "err", err)
		return false
	}
	initial := c.cfg.initialNode(src, now)
	nodes := c.deps.Client.Nodes()
	created, err := nodes.Create(ctx, initial, metav1.CreateOptions{})
	switch {
	case err == nil:
		c.log.Info("Registered the node")
		c.recordTransitions(nil, created)
		c.setNode(st, created)
		st.lastReport = now
		return true
	case apierrors.IsAlreadyExists(err), apierrors.IsForbidden(err):
		// Forbidden: a node may lack the right to create, yet exist.
	default:
		c.log.Error("Unable to register the node with the API server", "err", err)
		return false
	}
	createErr := err
	existing, err := nodes.Get(ctx, c.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		c.log.Error("Unable to register the node: creating it failed and so did getting the existing Node",
			"createErr", createErr, "err", err)
		return false
	}
	c.log.Info("Node was previously registered; adopting it")
	node, changed := adopt(existing, initial)
	if changed {
		updated, err := patchNodeStatus(ctx, c.deps.Client.Nodes(), existing, node)
		if err != nil {
			c.log.Error("Unable to reconcile the existing Node", "err", err)
			return false
		}
		node = updated
	}
	c.recordTransitions(existing, node)
	c.setNode(st, node)
	st.lastReport = time.Time{} // the kubelet writes its status at once after a restart
	return true
}

// setNode records the Node the API server returned and its UID for the
// Lease's owner reference.
func (c *Controller) setNode(st *state, node *v1.Node) {
	st.node = node
	c.observe(node)
	uid := node.UID
	c.uid.Store(&uid)
}

// syncStatus computes the status and writes it if it changed or the report
// period has passed. A failed write is tried once more against a freshly
// read Node; a Node deleted from the API server is registered again at the
// next sync.
func (c *Controller) syncStatus(ctx context.Context, st *state) {
	now := time.Now()
	src, err := c.deps.Status(now)
	if err != nil {
		c.log.Error("Unable to compute the node's status", "err", err)
		return
	}
	for try := 0; try < 2; try++ {
		if try > 0 {
			fresh, err := c.deps.Client.Nodes().Get(ctx, c.cfg.NodeName, metav1.GetOptions{})
			if err != nil {
				c.handleStatusError(st, fmt.Errorf("get node: %w", err))
				return
			}
			c.setNode(st, fresh)
		}
		node, changed := c.cfg.update(st.node, src, now)
		if !changed && now.Sub(st.lastReport) < c.cfg.StatusReportFrequency {
			return
		}
		updated, err := patchNodeStatus(ctx, c.deps.Client.Nodes(), st.node, node)
		if err == nil {
			c.recordTransitions(st.node, updated)
			c.setNode(st, updated)
			st.lastReport = now
			return
		}
		if try > 0 || ctx.Err() != nil {
			c.handleStatusError(st, err)
			return
		}
	}
}

// handleStatusError logs a status write that failed twice, and forgets a
// Node the API server no longer has so that it is registered again.
func (c *Controller) handleStatusError(st *state, err error) {
	if apierrors.IsNotFound(err) {
		c.log.Warn("The Node is gone from the API server; registering it again", "err", err)
		st.node = nil
		return
	}
	c.log.Error("Unable to update the node's status; will retry", "after", c.cfg.StatusUpdateFrequency, "err", err)
}

// leaseController returns the renewer of the node's Lease in
// kube-node-lease, owned by the Node, renewed every quarter of its duration.
func (c *Controller) leaseController() *leaseRenewer {
	d := time.Duration(c.cfg.LeaseDurationSeconds) * time.Second
	return &leaseRenewer{
		client: c.deps.Client.Leases(v1.NamespaceNodeLease),
		name:   c.cfg.NodeName, namespace: v1.NamespaceNodeLease, holder: c.cfg.NodeName,
		durationSeconds: c.cfg.LeaseDurationSeconds, interval: time.Duration(float64(d) * leaseRenewFraction),
		setOwner: c.setLeaseOwner, onRepeatedFailure: c.deps.OnRepeatedHeartbeatFailure, log: c.log,
	}
}

// setLeaseOwner makes the Node the Lease's owner, so that deleting the Node
// deletes its Lease. Without a registered Node it refuses (the lease
// controller then creates nothing and tries again at the next renewal).
func (c *Controller) setLeaseOwner(l *coordinationv1.Lease) error {
	if len(l.OwnerReferences) > 0 {
		return nil
	}
	uid := c.uid.Load()
	if uid == nil || *uid == "" {
		return errors.New("the Node is not registered yet")
	}
	l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: c.cfg.NodeName, UID: *uid}}
	return nil
}

// conditionEvents are the kubelet's event reasons for a node condition's
// status: [type][true, false].
var conditionEvents = map[v1.NodeConditionType][2]string{
	v1.NodeReady:          {"NodeReady", "NodeNotReady"},
	v1.NodeMemoryPressure: {"NodeHasInsufficientMemory", "NodeHasSufficientMemory"},
	v1.NodeDiskPressure:   {"NodeHasDiskPressure", "NodeHasNoDiskPressure"},
	v1.NodePIDPressure:    {"NodeHasInsufficientPID", "NodeHasSufficientPID"},
}

// recordTransitions records an event for each condition of written whose
// status differs from old's (every condition when old is nil), with the
// kubelet's reason and message.
func (c *Controller) recordTransitions(old, written *v1.Node) {
	if c.deps.Recorder == nil {
		return
	}
	for _, nc := range written.Status.Conditions {
		reasons, ok := conditionEvents[nc.Type]
		if !ok {
			continue
		}
		if old != nil {
			i := slices.IndexFunc(old.Status.Conditions, func(o v1.NodeCondition) bool { return o.Type == nc.Type })
			if i >= 0 && old.Status.Conditions[i].Status == nc.Status {
				continue
			}
		}
		reason := reasons[1]
		if nc.Status == v1.ConditionTrue {
			reason = reasons[0]
		}
		c.deps.Recorder.Eventf(nodeapi.NodeRef(c.cfg.NodeName), v1.EventTypeNormal, reason, "Node %s status is now: %s", c.cfg.NodeName, reason)
	}
}

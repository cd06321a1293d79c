// Package admission decides whether a pod may start on the node: a Chain of
// handlers, as the kubelet's pod admit handlers, run by the agent's sync loop for
// every new pod. The default chain is eviction admission (node pressure), then
// resource fit with critical-pod preemption on resource failures.
//
// Rejection reasons are the kubelet's: "Evicted" (node pressure), "OutOf<resource>"
// (for example OutOfcpu, OutOfmemory, OutOfpods, OutOfephemeral-storage,
// OutOfhugepages-2Mi, OutOfexample.com/gpu) with the InsufficientResourceError
// message, the predicate name (NodeAffinity, NodeName, NodePorts, TaintToleration)
// with "Predicate <name> failed", SysctlForbidden, AppArmor, PodOSNotSupported,
// PodOSSelectorNodeLabelDoesNotMatch, InvalidNodeInfo, and UnexpectedAdmissionError when
// preemption finds no victims ("Unexpected error while attempting to recover from
// admission failure: ...") or a handler fails.
//
// Admission only decides; it never kills. A critical pod that fits once other pods
// are preempted is admitted with a plan (Response.Preemption): the caller must kill
// the plan's victims, in order, before it starts the pod, as the kubelet's admission
// handler does inline (preemption.Executor does it with the kubelet's logs, events
// and metric).
//
// The agent admits with Start rather than Admit: for a pod that asks for devices,
// Start stops before the device allocation, which may wait on a device plugin, and
// returns a Pending to finish off the sync loop, so that no other pod waits on it.
//
// Differences from the kubelet: the plan is checked (the fit again, without the
// victims) before the pod is admitted (the kubelet admits without checking); the
// operating-system and device checks of the kubelet's predicate handler are
// handlers of their own (OSHandler, DeviceHandler); when no Node object is known,
// node affinity, node name and taints are not checked.
package admission

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/preemption"
)

// Rejection reasons set by this package besides the eviction package's "Evicted",
// the resource failures' "OutOf<resource>" and the predicate names.
const (
	// ReasonUnexpected is the kubelet's UnexpectedAdmissionError: a handler could not
	// decide, or preemption found no victims.
	ReasonUnexpected = "UnexpectedAdmissionError"
	// ReasonInvalidNodeInfo: the node's allocatable resources are not known.
	ReasonInvalidNodeInfo = "InvalidNodeInfo"
	// ReasonUnexpectedPredicate: a failure of a kind the chain does not know.
	ReasonUnexpectedPredicate = "UnexpectedPredicateFailureType"
)

// Request is the input of an admission handler. New fields may be added.
type Request struct {
	// Pod is the pod to admit. Handlers must not modify it.
	Pod *v1.Pod
}

// Response is the verdict being built by the chain. New fields may be added.
type Response struct {
	// Admit is true until a handler rejects the pod.
	Admit bool
	// Reason and Message explain a rejection, as in the pod's status (for example
	// "OutOfcpu" and "Node didn't have enough resource: cpu, ...").
	Reason, Message string
	// Failures are the failures of the first resource-fit check, in Fit's order;
	// empty when the pod fit as it was. They are kept when preemption then admits
	// the pod.
	Failures []error
	// Preemption, set only when Admit, is the plan under which the pod is admitted:
	// the caller must kill Preemption.Victims, in that order, before it starts the
	// pod. It is nil when the pod fits without preempting anyone. The chain has
	// killed nothing.
	Preemption *preemption.Plan
	// Pending, set only by Chain.Start, means the verdict is not known yet: a
	// slow step (the pod's device allocation) remains, then the handlers after it.
	// Admit is true so far; the pod may neither start nor be rejected before
	// Pending.Resume gives the verdict.
	Pending *Pending
}

// Victims returns the kills the pod's admission requires, in order: those of
// r.Preemption, or none.
func (r Response) Victims() []nodeapi.KillRequest {
	if r.Preemption == nil {
		return nil
	}
	return r.Preemption.Victims
}

// Reject marks resp as rejected with reason and message.
func (r *Response) Reject(reason, message string) {
	r.Admit, r.Reason, r.Message = false, reason, message
}

// Handler is one admission step.
type Handler interface {
	// Name identifies the handler in logs and errors.
	Name() string
	// Admit looks at req and either leaves resp alone (admit) or calls
	// resp.Reject. It returns an error only when it cannot decide; the chain then
	// rejects with ReasonUnexpected. It is called only from the goroutine that runs
	// the Chain, with resp.Admit true (a SlowHandler's slow requests excepted).
	Admit(ctx context.Context, req *Request, resp *Response) error
}

// SlowHandler is a Handler whose step may wait long for some pods: the device
// handler, on a device plugin's Allocate. Chain.Start leaves that step to
// Pending.Wait, off the admitting goroutine.
type SlowHandler interface {
	Handler
	// Slow reports whether Admit may wait long for req. It is called from the
	// admitting goroutine and must itself be quick. For a slow request, Admit is
	// called from Pending.Wait's goroutine, with a Response of its own (Admit
	// true, nothing else set) that the chain merges in Pending.Resume.
	Slow(req *Request) bool
}

// Chain runs handlers in order and stops at the first rejection. It has no state of
// its own; it is as safe for concurrent use as its handlers are (the agent calls it
// only from its sync loop).
type Chain struct {
	handlers []Handler
}

// NewChain returns a chain of the given handlers, run in that order.
func NewChain(handlers ...Handler) *Chain {
	return &Chain{handlers: handlers}
}

// Admit decides whether pod may start now, running every step, slow ones included,
// on the calling goroutine. A handler error becomes a rejection with
// ReasonUnexpected.
func (c *Chain) Admit(ctx context.Context, pod *v1.Pod) Response {
	resp := c.Start(ctx, pod)
	for resp.Pending != nil {
		resp.Pending.Wait(ctx)
		resp = resp.Pending.Resume(ctx)
	}
	return resp
}

// Start is Admit up to the first slow step the pod needs (a SlowHandler whose
// Slow is true: the pod asks for devices). It returns the verdict when there is
// none, or when an earlier handler rejected the pod; otherwise a Response with
// Pending set, whose Wait runs the slow step and whose Resume then the handlers
// after it. A pod that needs no slow step never waits on one, whatever other
// pods' slow steps are doing.
func (c *Chain) Start(ctx context.Context, pod *v1.Pod) Response {
	return c.run(ctx, &Request{Pod: pod}, Response{Admit: true}, 0)
}

// run runs the handlers from the i-th on, stopping before a slow step.
func (c *Chain) run(ctx context.Context, req *Request, resp Response, i int) Response {
	for ; i < len(c.handlers); i++ {
		h := c.handlers[i]
		if s, ok := h.(SlowHandler); ok && s.Slow(req) {
			resp.Pending = &Pending{chain: c, req: req, resp: resp, at: i}
			return resp
		}
		if err := h.Admit(ctx, req, &resp); err != nil {
			rejectUnexpected(&resp, h, err)
		}
		if !resp.Admit {
			break
		}
	}
	return resp
}

func rejectUnexpected(resp *Response, h Handler, err error) {
	resp.Reject(ReasonUnexpected, fmt.Sprintf("%s admission: %v", h.Name(), err))
}

// Pending is a pod's admission stopped before a slow step. Wait runs the step
// and Resume the rest; each is called once, Wait first. Wait may run on any
// goroutine (it is meant for one of its own); Resume runs where the chain runs,
// so the handlers after the slow step (the resource fit) see the pods admitted
// while it waited.
type Pending struct {
	chain *Chain
	req   *Request
	resp  Response // the verdict before the slow step
	at    int      // the slow handler's index
	// Set by Wait.
	stepResp Response
	stepErr  error
}

// Pod is the pod being admitted. Callers must not modify it.
func (p *Pending) Pod() *v1.Pod { return p.req.Pod }

// Wait runs the slow step. It returns when the step is done, which for device
// allocation is bounded by the device plugins' RPC timeout and by ctx.
func (p *Pending) Wait(ctx context.Context) {
	p.stepResp = Response{Admit: true}
	p.stepErr = p.chain.handlers[p.at].Admit(ctx, p.req, &p.stepResp)
}

// Resume finishes the admission after Wait returned: the slow step's verdict,
// then the handlers after it. The result may be Pending again (another slow
// step).
func (p *Pending) Resume(ctx context.Context) Response {
	resp := p.resp
	resp.Pending = nil
	h := p.chain.handlers[p.at]
	switch {
	case p.stepErr != nil:
		rejectUnexpected(&resp, h, p.stepErr)
		return resp
	case !p.stepResp.Admit:
		resp.Reject(p.stepResp.Reason, p.stepResp.Message)
		return resp
	}
	return p.chain.run(ctx, p.req, resp, p.at+1)
}

// Deps are the outside things the default chain needs.
type Deps struct {
	// ActivePods returns the pods admitted and not yet terminated. It may include
	// the pod being admitted; that one is left out.
	ActivePods func() []*v1.Pod
	// Conditions reports the node's pressure conditions (eviction.Manager).
	Conditions ConditionSource
	// Node returns the node's allocatable resources and, optionally, the Node object.
	Node func() (Node, error)
	// Preemption enables critical-pod preemption: a critical pod that does not fit
	// only for lack of resources is admitted with a plan of pods to preempt.
	Preemption bool
	// Devices, when set, raises each device resource's allocatable to at least the
	// devices already assigned (devicemanager.Manager), so pods holding devices
	// pass re-admission while their plugin is away.
	Devices AllocatableSanitizer
	// Allocator, when set, assigns devices to the pod after the eviction check
	// and before the resource fit (DeviceHandler).
	Allocator DeviceAllocator
	// AppArmorEnabled: the host enforces AppArmor profiles (HostAppArmorEnabled);
	// without it pods asking for one are rejected (AppArmorHandler).
	AppArmorEnabled bool
	// AllowedUnsafeSysctls are the kubelet's allowedUnsafeSysctls, each valid
	// (nodeapi.ValidateUnsafeSysctl); pods may set these and the safe sysctls
	// (SysctlHandler).
	AllowedUnsafeSysctls []string
}

// AllocatableSanitizer adjusts node allocatable before the fit check.
// devicemanager.Manager implements it. It must not modify its argument.
type AllocatableSanitizer interface {
	SanitizeAllocatable(allocatable v1.ResourceList) v1.ResourceList
}

// ConditionSource reports the node's current pressure conditions. eviction.Manager
// implements it. Conditions must be safe to call from the admitting goroutine.
type ConditionSource interface {
	Conditions() []v1.NodeConditionType
}

// New returns the default chain, in the kubelet's order: EvictionHandler,
// SysctlHandler, AppArmorHandler, OSHandler, DeviceHandler when deps.Allocator is
// set, then ResourceHandler with critical-pod preemption when deps.Preemption is
// set.
func New(deps Deps) (*Chain, error) {
	if deps.ActivePods == nil || deps.Conditions == nil || deps.Node == nil {
		return nil, errors.New("admission: ActivePods, Conditions and Node are required")
	}
	res := &ResourceHandler{ActivePods: deps.ActivePods, Node: deps.Node, Devices: deps.Devices}
	if deps.Preemption {
		pre, err := preemption.NewHandler(preemption.Deps{ActivePods: deps.ActivePods})
		if err != nil {
			return nil, fmt.Errorf("admission: %w", err)
		}
		res.Preemption = pre
	}
	for _, p := range deps.AllowedUnsafeSysctls {
		if err := nodeapi.ValidateUnsafeSysctl(p); err != nil {
			return nil, fmt.Errorf("admission: allowedUnsafeSysctls: %w", err)
		}
	}
	handlers := []Handler{
		&EvictionHandler{Conditions: deps.Conditions},
		&SysctlHandler{AllowedUnsafe: deps.AllowedUnsafeSysctls},
		&AppArmorHandler{Enabled: deps.AppArmorEnabled},
		&OSHandler{},
	}
	if deps.Allocator != nil {
		handlers = append(handlers, &DeviceHandler{Devices: deps.Allocator})
	}
	return NewChain(append(handlers, res)...), nil
}

// EvictionHandler rejects pods the node cannot take under pressure (eviction.Admit).
type EvictionHandler struct {
	Conditions ConditionSource
}

// Name returns "eviction".
func (h *EvictionHandler) Name() string { return "eviction" }

// Admit applies eviction.Admit with the current conditions.
func (h *EvictionHandler) Admit(_ context.Context, req *Request, resp *Response) error {
	if r := eviction.Admit(req.Pod, h.Conditions.Conditions()); !r.Admit {
		resp.Reject(r.Reason, r.Message)
	}
	return nil
}

// ResourceHandler checks that the pod fits the node (Fit) and, when it does not only
// for lack of resources and is critical, plans the preemption of other pods to make
// room (Response.Preemption). It is the kubelet's predicate admit handler with its
// critical-pod failure handler, minus the kills.
type ResourceHandler struct {
	// ActivePods returns the node's active pods; the pod being admitted is skipped.
	ActivePods func() []*v1.Pod
	// Node returns what Fit needs to know of the node.
	Node func() (Node, error)
	// Preemption, when set, handles resource failures of critical pods.
	Preemption *preemption.Handler
	// Devices, when set, adjusts the node's allocatable for assigned devices.
	Devices AllocatableSanitizer
}

// Name returns "resources".
func (h *ResourceHandler) Name() string { return "resources" }

// Admit runs Fit; on failure it offers them to Preemption and checks the plan: the
// fit again, without the victims (the kubelet admits without this check; it makes
// sure the plan does not overcommit the node). It admits with the plan in
// resp.Preemption, or rejects with the first remaining failure's reason, as the
// kubelet does; a rejected pod has no plan.
func (h *ResourceHandler) Admit(_ context.Context, req *Request, resp *Response) error {
	node, err := h.Node()
	if err != nil {
		resp.Reject(ReasonInvalidNodeInfo, "Kubelet cannot get node info.")
		return nil
	}
	if h.Devices != nil {
		node.Allocatable = h.Devices.SanitizeAllocatable(node.Allocatable)
	}
	others := without(h.ActivePods(), req.Pod, nil)
	failures := Fit(req.Pod, others, node)
	resp.Failures = failures
	if len(failures) == 0 {
		return nil
	}
	remaining := failures
	var plan *preemption.Plan
	if h.Preemption != nil {
		var err error
		remaining, plan, err = h.Preemption.HandleAdmissionFailure(req.Pod, failures)
		if err != nil {
			resp.Reject(ReasonUnexpected, "Unexpected error while attempting to recover from admission failure: "+err.Error())
			return nil
		}
		if len(remaining) == 0 {
			remaining = Fit(req.Pod, without(h.ActivePods(), req.Pod, plan.Victims), node)
		}
	}
	if len(remaining) > 0 {
		resp.Reject(reasonFor(remaining[0]))
		return nil
	}
	if plan != nil && len(plan.Victims) > 0 {
		resp.Preemption = plan
	}
	return nil
}

// reasonFor returns the kubelet's rejection reason and message for a failure.
func reasonFor(f error) (reason, message string) {
	var ir *preemption.InsufficientResource
	var pf *PredicateFailure
	switch {
	case errors.As(f, &ir):
		return "OutOf" + string(ir.ResourceName), ir.Error()
	case errors.As(f, &pf):
		return pf.Name, pf.Error()
	}
	return ReasonUnexpectedPredicate, fmt.Sprintf("GeneralPredicates failed due to %v, which is unexpected.", f)
}

// without returns pods other than pod and the victims' pods, matched by
// nodeapi.KeyOf.
func without(pods []*v1.Pod, pod *v1.Pod, victims []nodeapi.KillRequest) []*v1.Pod {
	skip := map[nodeapi.PodKey]bool{nodeapi.KeyOf(pod): true}
	for _, v := range victims {
		skip[nodeapi.KeyOf(v.Pod)] = true
	}
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		if p != nil && !skip[nodeapi.KeyOf(p)] {
			out = append(out, p)
		}
	}
	return out
}

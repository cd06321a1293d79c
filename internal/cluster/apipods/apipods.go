// Package apipods keeps the node's pods in step with a Kubernetes API server,
// as the kubelet does for its pods:
//
//   - in: a pod informer on spec.nodeName=NODE hands the complete set of the
//     node's pods to the agent under the source name [Source], each with the
//     kubelet's in-memory annotation kubernetes.io/config.source=api. Mirror
//     pods are never run; a malformed pod is skipped with a log line naming it.
//   - out: a status writer puts each API pod's status, as the agent derives
//     it, to the pod's status subresource when it changed (promptly after the
//     agent's table changed, and in a full pass every StatusPeriod), retried
//     on conflict; it deletes a pod being deleted (grace 0, UID precondition)
//     once the agent stopped and cleaned it up; and it keeps one mirror pod
//     per static pod (created, recreated when deleted or stale, deleted when
//     its static pod is gone), which carries the static pod's status.
//
// Everything the node writes is what a kubelet may write under the Node
// authorizer and the NodeRestriction admission plugin.
package apipods

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodekeeper/nodekeeper/internal/cluster/kubeclient"
)

// Source is the agent's name for the API server's pods, and the value of
// their config.source annotation (the kubelet's).
const Source = "api"

// DefaultStatusPeriod is the interval of the full status pass (the kubelet's
// status manager syncs every 10 s).
const DefaultStatusPeriod = 10 * time.Second

// Agent is what the package needs of the agent (*agent.Agent). All methods
// may be called from any goroutine.
type Agent interface {
	// SetPods hands source's complete pod set to the agent; it returns once
	// the agent took it.
	SetPods(ctx context.Context, source string, pods []*v1.Pod) error
	// Pods is every pod the agent holds with its current status; shared,
	// read only.
	Pods() []*v1.Pod
	// Changes gets a value after the agent's table changed (coalesced).
	Changes() <-chan struct{}
	// IsPodTerminated: the pod's containers stopped for good.
	IsPodTerminated(uid string) bool
	// PodCleanedUp: terminated, and nothing of the pod runs any more.
	PodCleanedUp(pod *v1.Pod) bool
	// IsPodDeleted: no source wants the pod (or, once all sources spoke, none
	// ever gave it).
	IsPodDeleted(uid string) bool
}

// Config is the syncer's settings.
type Config struct {
	// NodeName is the Node this agent is. Required.
	NodeName string
	// StatusPeriod is the interval of the full status pass; 0 is
	// DefaultStatusPeriod.
	StatusPeriod time.Duration
}

// Deps are the syncer's collaborators.
type Deps struct {
	// Client talks to the API server as the node. Required.
	Client Client
	// Agent runs the pods. Required.
	Agent Agent
	// Logger gets the syncer's logs; nil discards them.
	Logger *slog.Logger
}

// Client is the part of the API client the syncer uses;
// kubeclient.Interface implements it.
type Client interface {
	Pods(namespace string) kubeclient.PodInterface
	Nodes() kubeclient.NodeInterface
}

// Syncer is the pod informer, the source that feeds the agent and the
// status, deletion and mirror-pod writer. Create it with New and run it
// with Run.
type Syncer struct {
	cfg    Config
	client Client
	agent  Agent
	log    *slog.Logger

	informer cache.SharedIndexInformer
	lister   listers.PodLister
	// podsC and statusC are coalescing pokes (capacity 1) from the informer's
	// handlers to the source loop and to the status loop.
	podsC   chan struct{}
	statusC chan struct{}

	// mu guards skipped: the malformed pods logged already, by UID, with the
	// resourceVersion logged (so each version is logged once).
	mu      sync.Mutex
	skipped map[string]string
}

// New returns a syncer; it starts nothing.
func New(cfg Config, deps Deps) (*Syncer, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("apipods: NodeName is required")
	}
	if deps.Client == nil || deps.Agent == nil {
		return nil, errors.New("apipods: Client and Agent are required")
	}
	if cfg.StatusPeriod < 0 {
		return nil, fmt.Errorf("apipods: StatusPeriod %v is negative", cfg.StatusPeriod)
	}
	if cfg.StatusPeriod == 0 {
		cfg.StatusPeriod = DefaultStatusPeriod
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Syncer{
		cfg: cfg, client: deps.Client, agent: deps.Agent,
		log:   deps.Logger.With("subsystem", "apipods"),
		podsC: make(chan struct{}, 1), statusC: make(chan struct{}, 1),
		skipped: map[string]string{},
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	pods := deps.Client.Pods(metav1.NamespaceAll)
	// A client that says it cannot serve watch-list (client-go's fake, in
	// tests) is listed and watched the old way.
	s.informer = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return pods.Watch(ctx, o)
		},
	}, deps.Client), &v1.Pod{}, 0, cache.Indexers{})
	// The cache keeps no managed fields: nothing here reads them.
	if err := s.informer.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*v1.Pod); ok {
			p.ManagedFields = nil
		}
		return obj, nil
	}); err != nil {
		return nil, fmt.Errorf("apipods: %w", err)
	}
	poke := func(any) { s.poke() }
	if _, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(any, any) { s.poke() },
		DeleteFunc: poke,
	}); err != nil {
		return nil, fmt.Errorf("apipods: %w", err)
	}
	s.lister = listers.NewPodLister(s.informer.GetIndexer())
	return s, nil
}

// poke wakes both loops; it never blocks.
func (s *Syncer) poke() {
	for _, c := range []chan struct{}{s.podsC, s.statusC} {
		select {
		case c <- struct{}{}:
		default: // one is pending already
		}
	}
}

// Run runs the informer, the source loop and the status loop until ctx ends,
// and returns nil after they all stopped. While the API server cannot be
// reached, the informer retries with back-off and the agent gets no set (its
// other sources' pods keep running). It may be called once.
func (s *Syncer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.informer.RunWithContext(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced) {
		return nil
	}
	s.log.Info("Pods from the API server listed", "node", s.cfg.NodeName)
	wg.Go(func() { s.runStatus(ctx) })
	s.runSource(ctx)
	return nil
}

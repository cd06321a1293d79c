// Package localpods is nodekeeper's local source of ordinary pods: the pods a
// user creates on this node with `nodekeeper apply` and removes with
// `nodekeeper delete pod`, as an API server would hand them to the kubelet.
//
// Unlike static pods (package podsource), these pods are not critical unless
// their priority class makes them so: they go through the whole admission
// chain and may be evicted and preempted. Each gets an API-like identity: a
// random UUID, a creation timestamp, the config source annotation "api" and the
// priority the API server's priority admission would resolve.
//
// The [Store] persists its pods in one checkpoint file in the state directory
// (atomic, checksummed; an unreadable file is moved aside and logged), so
// they survive restarts of the agent, and hands its complete set to the agent
// under the source name [Source] after every change. Deleting a pod is
// graceful: the agent stops it with its grace period, then the pod leaves the
// store. [Store.Handler] serves POST /pods and DELETE /pods/{namespace}/{name}
// on the root-only unix socket alone ([ServeUnix]), never on a TCP port.
package localpods

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/nodekeeper/nodekeeper/internal/base/checkpoint"
	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/internal/core/podsource"
	"github.com/nodekeeper/nodekeeper/nodeapi"
	"github.com/nodekeeper/nodekeeper/qos"
)

// Source is the agent's name for this pod source. It differs from the name
// of the API-server source ("api"), so that both can feed one agent.
const Source = "local"

// ConfigSource is the config.source annotation the store's pods carry: the
// kubelet's value for pods from the API server, which keeps them ordinary
// (not static, not critical by source).
const ConfigSource = "api"

// FileName is the store's checkpoint file in the state directory.
const FileName = "local-pods.json"

// The priorities the API server's built-in priority classes resolve to.
const (
	SystemClusterCritical = "system-cluster-critical"
	SystemNodeCritical    = "system-node-critical"
	// SystemNodeCriticalPriority is system-node-critical's value, 1000 above
	// qos.SystemCriticalPriority (system-cluster-critical's).
	SystemNodeCriticalPriority = qos.SystemCriticalPriority + 1000
)

// Errors of the store's operations; the HTTP handler maps them to status codes.
var (
	// ErrExists: a pod of that namespace and name is stored already (409).
	ErrExists = errors.New("already exists")
	// ErrNotFound: no stored pod has that namespace and name (404).
	ErrNotFound = errors.New("not found")
)

// Agent is what the store needs of the agent (*agent.Agent).
type Agent interface {
	// SetPods hands source's complete pod set to the agent.
	SetPods(ctx context.Context, source string, pods []*v1.Pod) error
	// KillPod stops a pod and returns once it stopped.
	KillPod(ctx context.Context, req nodeapi.KillRequest) error
}

// Config is the store's settings.
type Config struct {
	// Path is the checkpoint file. Required.
	Path string
	// NodeName is the node the pods are bound to (spec.nodeName).
	NodeName string
}

// Deps are the store's collaborators.
type Deps struct {
	// Agent runs the pods. Required.
	Agent Agent
	// Logger receives the store's logs; nil discards them.
	Logger *slog.Logger
	// NewUID makes pod UIDs; nil is a random (version 4) UUID from
	// k8s.io/apimachinery, as the API server's.
	NewUID func() types.UID
	// Observed, when set, returns the agent's pods with their statuses
	// (agent.Pods): a stored pod the agent reports finished (phase
	// Succeeded or Failed: completed, evicted, preempted) gets that status
	// saved, so that after a restart the agent does not start it again, as
	// the API server keeps a pod's final status for the kubelet.
	Observed func() []*v1.Pod
}

// ObservePeriod is how often Run looks for finished pods in Deps.Observed.
const ObservePeriod = time.Second

// killRetry is the pause between attempts to stop a deleted pod whose kill
// failed (the agent keeps trying meanwhile).
const killRetry = time.Second

// Store holds the local pods. Its methods are safe for concurrent use.
type Store struct {
	cfg      Config
	agent    Agent
	log      *slog.Logger
	newUID   func() types.UID
	observed func() []*v1.Pod

	// pushMu orders the sets handed to the agent: each push takes the set
	// under mu after it holds pushMu, so a later push has a later set.
	pushMu sync.Mutex
	mu     sync.Mutex
	pods   []*v1.Pod                   // guarded by mu; sorted by namespace/name
	gone   map[types.UID]chan struct{} // guarded by mu; closed when a deleted pod left the store

	started chan struct{} // closed by Run once the persisted set was handed over
	runCtx  context.Context
	wg      sync.WaitGroup
}

// New loads the store's file. A missing file is an empty store; a file that
// cannot be read as a store (bad JSON, wrong checksum) is moved aside with an
// error log and the store starts empty.
func New(cfg Config, deps Deps) (*Store, error) {
	if cfg.Path == "" || deps.Agent == nil {
		return nil, errors.New("localpods: Path and Agent are required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.NewUID == nil {
		deps.NewUID = uuid.NewUUID
	}
	s := &Store{
		cfg: cfg, agent: deps.Agent, log: deps.Logger.With("subsystem", "localpods"),
		newUID: deps.NewUID, observed: deps.Observed, gone: map[types.UID]chan struct{}{}, started: make(chan struct{}),
	}
	pods, err := load(cfg.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		aside, merr := checkpoint.MoveAside(cfg.Path, time.Now())
		if merr != nil {
			return nil, fmt.Errorf("localpods: %w; %w", err, merr)
		}
		s.log.Error("Local pods file unreadable; moved aside, starting with no local pods", "err", err, "movedTo", aside)
	default:
		s.pods = pods
		s.sortPods()
	}
	return s, nil
}

// file is the checkpoint's layout: Pods as JSON and the SHA-256 of exactly
// those bytes, in hex.
type file struct {
	Checksum string          `json:"checksum"`
	Pods     json.RawMessage `json:"pods"`
}

func load(path string) ([]*v1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if sum := checksum(f.Pods); sum != f.Checksum {
		return nil, fmt.Errorf("%s: checksum %q, content hashes to %q", path, f.Checksum, sum)
	}
	var pods []*v1.Pod
	if err := json.Unmarshal(f.Pods, &pods); err != nil {
		return nil, fmt.Errorf("%s: pods: %w", path, err)
	}
	for i, p := range pods {
		if p == nil || p.UID == "" || p.Name == "" {
			return nil, fmt.Errorf("%s: pods[%d]: no name or UID", path, i)
		}
	}
	return pods, nil
}

func checksum(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// saveLocked writes the store's file; s.mu is held.
func (s *Store) saveLocked() error {
	pods, err := json.Marshal(s.pods)
	if err != nil {
		return fmt.Errorf("localpods: %w", err)
	}
	data, err := json.Marshal(file{Checksum: checksum(pods), Pods: pods})
	if err != nil {
		return fmt.Errorf("localpods: %w", err)
	}
	if err := checkpoint.WriteFile(s.cfg.Path, data, 0o600); err != nil {
		return fmt.Errorf("localpods: %w", err)
	}
	return nil
}

func (s *Store) sortPods() {
	slices.SortFunc(s.pods, func(a, b *v1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
}

// Pods returns the stored pods, sorted by namespace and name. The caller must
// not modify them.
func (s *Store) Pods() []*v1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.pods)
}

// Run hands the persisted pods to the agent, resumes the deletions a previous
// run left unfinished, and saves the final status of pods the agent reports
// finished (Deps.Observed, every ObservePeriod) until ctx ends; then it waits
// for the deletions in flight to return (they stop with ctx, and resume on
// the next start) and returns nil. It returns the agent's error at once if
// the agent refuses the set (Source not among its table's sources). It may be
// called once.
func (s *Store) Run(ctx context.Context) error {
	s.runCtx = ctx
	if err := s.push(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err // the agent refuses the source: a wiring error
	}
	s.mu.Lock()
	for _, p := range s.pods {
		if p.DeletionTimestamp != nil {
			s.startDeleteLocked(p)
		}
	}
	s.mu.Unlock()
	close(s.started)
	defer s.wg.Wait()
	if s.observed == nil {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(ObservePeriod)
	defer t.Stop()
	var clashes map[string]bool // only Run's goroutine touches it
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			pods := s.observed()
			s.recordFinished(pods)
			clashes = s.warnClashes(pods, clashes)
		}
	}
}

// warnClashes logs a warning for each stored pod whose namespace and name a
// pod of another source in pods (the agent's) has, unless warned (the clashes
// of the last call) holds it; it returns the clashes seen. Create refuses
// such a name; a static pod written later with a stored pod's name runs
// beside it, as the kubelet runs an API pod and a static pod of one name
// (its config merge keeps each source's pods), until one is removed.
func (s *Store) warnClashes(pods []*v1.Pod, warned map[string]bool) map[string]bool {
	others := map[string]*v1.Pod{}
	for _, q := range pods {
		if q.Annotations[qos.ConfigSourceAnnotation] != ConfigSource {
			others[q.Namespace+"/"+q.Name] = q
		}
	}
	if len(others) == 0 {
		return nil
	}
	var now map[string]bool
	for _, p := range s.Pods() {
		q := others[p.Namespace+"/"+p.Name]
		if q == nil {
			continue
		}
		key := string(p.UID) + "/" + string(q.UID)
		if now == nil {
			now = map[string]bool{}
		}
		now[key] = true
		if !warned[key] {
			s.log.Warn("A pod of another source has the namespace and name of a local pod; both run until one is removed",
				"pod", nodeapi.PodName(p), "podUID", p.UID, "otherUID", q.UID, "otherSource", q.Annotations[qos.ConfigSourceAnnotation])
		}
	}
	return now
}

// recordFinished saves the final status of the stored pods that pods, the
// agent's, shows finished and the store does not yet.
func (s *Store) recordFinished(pods []*v1.Pod) {
	final := map[types.UID]*v1.Pod{}
	for _, p := range pods {
		if ph := p.Status.Phase; ph == v1.PodSucceeded || ph == v1.PodFailed {
			final[p.UID] = p
		}
	}
	if len(final) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.pods
	var changed []*v1.Pod
	for i, p := range s.pods {
		f := final[p.UID]
		if f == nil || p.Status.Phase == f.Status.Phase || p.DeletionTimestamp != nil {
			continue
		}
		if len(changed) == 0 {
			s.pods = slices.Clone(s.pods)
		}
		q := p.DeepCopy()
		q.Status = *f.Status.DeepCopy()
		s.pods[i] = q
		changed = append(changed, q)
	}
	if len(changed) == 0 {
		return
	}
	if err := s.saveLocked(); err != nil {
		s.pods = old
		s.log.Error("Saving finished local pods failed", "err", err)
		return
	}
	for _, p := range changed {
		s.log.Info("Local pod finished", "pod", nodeapi.PodName(p), "podUID", p.UID, "phase", p.Status.Phase, "reason", p.Status.Reason)
	}
}

// push hands the current set to the agent.
func (s *Store) push(ctx context.Context) error {
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	pods := s.Pods()
	if err := s.agent.SetPods(ctx, Source, pods); err != nil {
		if ctx.Err() == nil {
			s.log.Error("Handing local pods to the agent failed", "err", err)
		}
		return err
	}
	return nil
}

// Create parses data, the manifest file (its name is used in errors only),
// and stores its pods, all or none: each pod is decoded strictly, defaulted
// and validated (podsource.ParsePods), given its identity (Prepare), and
// checked to be new by namespace and name (ErrExists). The set with the new
// pods is handed to the agent before Create returns. It returns the stored
// pods in manifest order. An error in the manifest is of class
// decode.ErrBadInput.
func (s *Store) Create(ctx context.Context, name string, data []byte) ([]*v1.Pod, error) {
	pods, errs := podsource.ParsePods(name, data, s.cfg.NodeName)
	if len(errs) > 0 {
		err := errs[0]
		if len(errs) > 1 {
			err = fmt.Errorf("%w (and %d more)", err, len(errs)-1)
		}
		return nil, err
	}
	if len(pods) == 0 {
		return nil, decode.Badf(name, "no pods")
	}
	now := time.Now()
	seen := map[string]bool{}
	for _, p := range pods {
		if err := Prepare(p, s.cfg.NodeName, s.newUID(), now); err != nil {
			return nil, decode.Bad(fmt.Errorf("%s: pod %q: %w", name, p.Namespace+"/"+p.Name, err))
		}
		key := p.Namespace + "/" + p.Name
		if seen[key] {
			return nil, decode.Bad(fmt.Errorf("%s: pod %q is given twice", name, key))
		}
		seen[key] = true
	}
	if err := s.nameTaken(pods); err != nil {
		return nil, err
	}
	s.mu.Lock()
	for _, p := range pods {
		if s.findLocked(p.Namespace, p.Name) >= 0 {
			s.mu.Unlock()
			return nil, fmt.Errorf("pod %q: %w", p.Namespace+"/"+p.Name, ErrExists)
		}
	}
	old := s.pods
	s.pods = append(slices.Clone(s.pods), pods...)
	s.sortPods()
	if err := s.saveLocked(); err != nil {
		s.pods = old
		s.mu.Unlock()
		return nil, err
	}
	s.mu.Unlock()
	for _, p := range pods {
		s.log.Info("Local pod created", "pod", nodeapi.PodName(p), "podUID", p.UID)
	}
	if err := s.push(ctx); err != nil {
		return nil, err
	}
	return pods, nil
}

// nameTaken returns an ErrExists error when the agent (Deps.Observed) runs a
// pod of another source than the API's, a static pod, with the namespace and
// name of one of pods: the agent keeps pods by UID and would run both.
// Pods of source "api" (the store's own, and an API server's) are the
// store's to check (ErrExists) or not its concern.
func (s *Store) nameTaken(pods []*v1.Pod) error {
	if s.observed == nil {
		return nil
	}
	want := make(map[string]bool, len(pods))
	for _, p := range pods {
		want[p.Namespace+"/"+p.Name] = true
	}
	for _, q := range s.observed() {
		key := q.Namespace + "/" + q.Name
		src := q.Annotations[qos.ConfigSourceAnnotation]
		if !want[key] || src == ConfigSource {
			continue
		}
		what := fmt.Sprintf("the pod of config source %q", src)
		if src == podsource.FileSource {
			what = "the static pod"
		}
		return fmt.Errorf("pod %q: %w: %s %s (uid %s) has that namespace and name", key, ErrExists, what, key, q.UID)
	}
	return nil
}

// Prepare gives a parsed pod (defaulted and valid) the identity and the
// fields the API server and the scheduler would: namespace "default" when
// empty, uid, creationTimestamp now, spec.nodeName, the config.source
// annotation "api", the priority of its priority class and the preemption
// policy PreemptLowerPriority, and a status of phase Pending and nothing else.
// Without an API server only the built-in classes exist: system-node-critical,
// system-cluster-critical, and none (priority 0); another class, or a
// spec.priority other than the class's, is an error naming the field.
func Prepare(p *v1.Pod, nodeName string, uid types.UID, now time.Time) error {
	if p.Namespace == "" {
		p.Namespace = v1.NamespaceDefault
	}
	var prio int32
	switch c := p.Spec.PriorityClassName; c {
	case "":
	case SystemClusterCritical:
		prio = qos.SystemCriticalPriority
	case SystemNodeCritical:
		prio = SystemNodeCriticalPriority
	default:
		return fmt.Errorf("spec.priorityClassName: %q: no such priority class (without an API server only %s and %s exist)",
			c, SystemNodeCritical, SystemClusterCritical)
	}
	if p.Spec.Priority != nil && *p.Spec.Priority != prio {
		return fmt.Errorf("spec.priority: %d: must not be given, or must be %d, the priority of class %q", *p.Spec.Priority, prio, p.Spec.PriorityClassName)
	}
	p.Spec.Priority = &prio
	if p.Spec.PreemptionPolicy == nil {
		pol := v1.PreemptLowerPriority
		p.Spec.PreemptionPolicy = &pol
	}
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	p.UID = uid
	p.CreationTimestamp = metav1.NewTime(now.Truncate(time.Second)) // the API's precision
	p.ResourceVersion, p.Generation = "", 1
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = nil, nil
	p.Spec.NodeName = nodeName
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[qos.ConfigSourceAnnotation] = ConfigSource
	p.Status = v1.PodStatus{Phase: v1.PodPending}
	return nil
}

func (s *Store) findLocked(namespace, name string) int {
	return slices.IndexFunc(s.pods, func(p *v1.Pod) bool { return p.Namespace == namespace && p.Name == name })
}

// Delete deletes the pod namespace/name gracefully: it marks the pod deleted
// (deletionTimestamp, deletionGracePeriodSeconds: grace, or the pod's
// terminationGracePeriodSeconds when nil) in the file, the agent stops it
// within that grace, and the pod then leaves the store and the agent. The
// deletion goes on in the background, across restarts, whatever becomes of
// ctx: Delete returns the marked pod once the pod left the store, or with
// ctx's error. Deleting a pod being deleted waits for that deletion. A pod
// the store does not hold is ErrNotFound.
func (s *Store) Delete(ctx context.Context, namespace, name string, grace *int64) (*v1.Pod, error) {
	select {
	case <-s.started:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if grace != nil && *grace < 0 {
		return nil, decode.Bad(fmt.Errorf("gracePeriodSeconds: %d: must not be negative", *grace))
	}
	s.mu.Lock()
	i := s.findLocked(namespace, name)
	if i < 0 {
		s.mu.Unlock()
		return nil, fmt.Errorf("pod %q: %w", namespace+"/"+name, ErrNotFound)
	}
	p := s.pods[i]
	if p.DeletionTimestamp == nil {
		q := p.DeepCopy()
		now := metav1.NewTime(time.Now())
		q.DeletionTimestamp = &now
		g := int64(v1.DefaultTerminationGracePeriodSeconds)
		if grace != nil {
			g = *grace
		} else if p.Spec.TerminationGracePeriodSeconds != nil {
			g = *p.Spec.TerminationGracePeriodSeconds
		}
		q.DeletionGracePeriodSeconds = &g
		s.pods[i] = q
		if err := s.saveLocked(); err != nil {
			s.pods[i] = p
			s.mu.Unlock()
			return nil, err
		}
		p = q
		s.log.Info("Deleting local pod", "pod", nodeapi.PodName(p), "podUID", p.UID, "gracePeriod", g)
		s.startDeleteLocked(p)
	}
	done := s.gone[p.UID]
	s.mu.Unlock()
	select {
	case <-done:
		return p, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// startDeleteLocked starts the deletion of p, marked deleted; s.mu is held.
func (s *Store) startDeleteLocked(p *v1.Pod) {
	if _, ok := s.gone[p.UID]; ok {
		return
	}
	done := make(chan struct{})
	s.gone[p.UID] = done
	ctx := s.runCtx
	s.wg.Go(func() {
		if !s.finishDelete(ctx, p) {
			return
		}
		s.mu.Lock()
		delete(s.gone, p.UID)
		s.mu.Unlock()
		close(done)
	})
}

// finishDelete stops p through the agent, then removes it from the store and
// hands the agent the set without it. It reports false when ctx ended first.
func (s *Store) finishDelete(ctx context.Context, p *v1.Pod) bool {
	// The agent sees the pod marked deleted, then stops it with its grace.
	if s.push(ctx) != nil {
		return false
	}
	for {
		err := s.agent.KillPod(ctx, nodeapi.KillRequest{Pod: p, GracePeriodOverride: p.DeletionGracePeriodSeconds})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false
		}
		s.log.Error("Stopping deleted local pod failed, will retry", "pod", nodeapi.PodName(p), "podUID", p.UID, "err", err)
		select {
		case <-time.After(killRetry):
		case <-ctx.Done():
			return false
		}
	}
	s.mu.Lock()
	i := slices.IndexFunc(s.pods, func(q *v1.Pod) bool { return q.UID == p.UID })
	if i >= 0 {
		old := s.pods
		s.pods = slices.Delete(slices.Clone(s.pods), i, i+1)
		if err := s.saveLocked(); err != nil {
			// Still marked deleted in the file: the next start finishes it.
			s.pods = old
			s.mu.Unlock()
			s.log.Error("Removing deleted local pod from the file failed", "pod", nodeapi.PodName(p), "err", err)
			return false
		}
	}
	s.mu.Unlock()
	s.log.Info("Local pod deleted", "pod", nodeapi.PodName(p), "podUID", p.UID)
	return s.push(ctx) == nil
}

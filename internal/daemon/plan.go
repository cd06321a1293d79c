package daemon

import (
	"context"
	"sync"

	"golang.org/x/sync/errgroup"
)

// part is one long-lived piece of the running agent: the managed containerd,
// the sync loop, a manager's loop, a server.
type part struct {
	// Name names the part in the log line that lists the parts.
	Name string
	// Run runs the part until ctx ends, then returns nil after its
	// goroutines returned; an error stops every part.
	Run func(ctx context.Context) error
	// Ready, when set, is closed once the part serves (containerd answers,
	// a socket listens): the parts after it start only then. Nil: ready
	// once started.
	Ready <-chan struct{}
	// Last runs the part on a context that ends only once every other part
	// has returned, so that it takes their last words (the events writer
	// flushes their last events).
	Last bool
}

// plan is the ordered list of the agent's parts. Each phase adds its parts
// (add) and the runner starts the ones added since (start), in order.
type plan struct {
	parts []part
	// started counts the parts of parts the runner has started.
	started int
}

// add appends parts to the plan.
func (p *plan) add(parts ...part) { p.parts = append(p.parts, parts...) }

// names returns the parts' names, in order.
func (p *plan) names() []string {
	names := make([]string, len(p.parts))
	for i, pt := range p.parts {
		names[i] = pt.Name
	}
	return names
}

// runner runs parts under one errgroup: the first failure, or the caller's
// context ending, stops them all. Only the goroutine that made it calls its
// methods.
type runner struct {
	// ctx is the parts' context: it ends with the caller's, or on the first
	// error of a part. Phases built while the runner runs use it.
	ctx      context.Context
	cancel   context.CancelFunc // ends ctx
	g        *errgroup.Group
	lastCtx  context.Context // the Last parts'
	stopLast context.CancelFunc
	last     sync.WaitGroup
	lastErr  chan error // capacity 1: the first error of a Last part
}

// newRunner returns a runner whose parts stop when ctx ends.
func newRunner(ctx context.Context) *runner {
	r := &runner{lastErr: make(chan error, 1)}
	r.lastCtx, r.stopLast = context.WithCancel(context.WithoutCancel(ctx))
	ctx, r.cancel = context.WithCancel(ctx)
	r.g, r.ctx = errgroup.WithContext(ctx)
	return r
}

// start starts the plan's parts not started yet, in order, each once the
// one before it is ready. It reports false when the runner's context ended
// first (a part failed, or the caller's context ended): the parts after
// that are not started.
func (r *runner) start(p *plan) bool {
	for p.started < len(p.parts) {
		if r.ctx.Err() != nil {
			return false
		}
		pt := p.parts[p.started]
		p.started++
		if pt.Last {
			r.last.Go(func() {
				if err := pt.Run(r.lastCtx); err != nil {
					select {
					case r.lastErr <- err:
					default:
					}
					r.cancel() // stops the others
				}
			})
		} else {
			r.g.Go(func() error { return pt.Run(r.ctx) })
		}
		if pt.Ready != nil {
			select {
			case <-pt.Ready:
			case <-r.ctx.Done():
				return false
			}
		}
	}
	return true
}

// wait waits until every part returned, the Last ones after the others, and
// returns the first error of a part, or nil when the caller's context ended
// the run. It is called once.
func (r *runner) wait() error {
	err := r.g.Wait()
	r.cancel()
	r.stopLast()
	r.last.Wait()
	if err == nil {
		select {
		case err = <-r.lastErr:
		default:
		}
	}
	return err
}

package simulate

import (
	"context"
	"log/slog"
	"time"
)

// virtualTimeHandler stamps every record with the simulation's virtual time
// before passing it on, so that `-v` log lines say when in the scenario a
// manager logged, not when the host ran it. It is safe for concurrent use when
// the wrapped handler and now are.
type virtualTimeHandler struct {
	next slog.Handler
	now  func() time.Time
}

func (h virtualTimeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

// Handle replaces the record's time with the virtual time.
func (h virtualTimeHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Time = h.now()
	return h.next.Handle(ctx, r)
}

func (h virtualTimeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return virtualTimeHandler{next: h.next.WithAttrs(attrs), now: h.now}
}

func (h virtualTimeHandler) WithGroup(name string) slog.Handler {
	return virtualTimeHandler{next: h.next.WithGroup(name), now: h.now}
}

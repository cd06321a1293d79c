package daemon

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/servers/server"
)

// healthzRetry is how long the healthz listener waits before it tries again
// to listen after it could not (the kubelet's is 5 s too).
const healthzRetry = 5 * time.Second

// healthz serves GET /healthz (and /healthz/NAME) alone on its own address:
// the kubelet's healthzBindAddress:healthzPort, which is what the node e2e
// harness and kubeadm poll to know the kubelet is up. It answers "ok" when
// every check passes, else 500 naming the failed ones. When it cannot listen
// (the port is taken) it logs why and tries again every retry period rather
// than stopping the agent, as the kubelet does.
type healthz struct {
	cfg   server.Config
	deps  server.Deps
	retry time.Duration
	log   *slog.Logger

	listening chan struct{} // closed the first time it listens
	once      sync.Once     // closes listening
	mu        sync.Mutex    // guards addr
	addr      string        // where it listens, "" when it does not
}

// newHealthz validates the address and checks; retry 0 is healthzRetry.
func newHealthz(address string, port int, checks []server.Check, retry time.Duration, log *slog.Logger) (*healthz, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if retry <= 0 {
		retry = healthzRetry
	}
	h := &healthz{
		cfg:       server.Config{Address: address, Port: port, AnyHost: true}, // as the kubelet's
		deps:      server.Deps{Healthz: checks, Logger: log},
		retry:     retry,
		log:       log,
		listening: make(chan struct{}),
	}
	if _, err := server.New(h.cfg, h.deps); err != nil { // the same validation as each Run's
		return nil, err
	}
	return h, nil
}

func (h *healthz) setAddr(a string) {
	h.mu.Lock()
	h.addr = a
	h.mu.Unlock()
}

// Run serves until ctx ends, then returns nil after its goroutines end.
func (h *healthz) Run(ctx context.Context) error {
	want := net.JoinHostPort(h.cfg.Address, strconv.Itoa(h.cfg.Port))
	for {
		srv, err := server.New(h.cfg, h.deps)
		if err != nil {
			return err // validated in newHealthz: cannot happen
		}
		served := make(chan error, 1)
		go func() { served <- srv.Run(ctx) }()
		<-srv.Ready()
		if a := srv.Addr(); a != "" {
			h.setAddr(a)
			h.once.Do(func() { close(h.listening) })
			h.log.Info("healthz serving", "addr", a)
		}
		err = <-served
		h.setAddr("")
		if ctx.Err() != nil {
			return nil
		}
		h.log.Error("Healthz not served; trying again", "addr", want, "retry", h.retry, "err", err)
		t := time.NewTimer(h.retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodekeeper/nodekeeper/prober"
)

// cpuTime is the CPU (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssBytes is this process's resident set size, from /proc/self/statm.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// portSet holds the benchmark servers' ports as /proc/net/tcp writes them
// (upper-case hex).
type portSet map[string]bool

// timeWaitSockets counts the IPv4 TCP sockets in TIME-WAIT of connections
// to the benchmark servers: on the client side (remote port is a server's)
// and on the server side (local port is a server's).
func timeWaitSockets(serverPorts portSet) (client, server int) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return -1, -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || fs[3] != "06" {
			continue
		}
		_, lport, _ := strings.Cut(fs[1], ":")
		_, rport, _ := strings.Cut(fs[2], ":")
		if serverPorts[rport] {
			client++
		} else if serverPorts[lport] {
			server++
		}
	}
	return client, server
}

func newPortSet(addrs []string) portSet {
	serverPorts := portSet{}
	for _, a := range addrs {
		_, p, _ := strings.Cut(a, ":")
		n, _ := strconv.Atoi(p)
		serverPorts[fmt.Sprintf("%04X", n)] = true
	}
	return serverPorts
}

// latencies collects durations from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration // guarded by mu
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// percentiles returns p50, p99 and the maximum.
func (l *latencies) percentiles() (p50, p99, max time.Duration) {
	l.mu.Lock()
	d := slices.Clone(l.d)
	l.mu.Unlock()
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return at(0.50), at(0.99), d[len(d)-1]
}

// sample is one point of the resource series.
type sample struct {
	At                             time.Duration
	Goroutines                     int
	RSS                            int64
	HeapInuse                      uint64
	TimeWaitClient, TimeWaitServer int
}

func takeSample(start time.Time, ps portSet) sample {
	c, s := timeWaitSockets(ps)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return sample{At: time.Since(start).Round(time.Second), Goroutines: runtime.NumGoroutine(), RSS: rssBytes(),
		HeapInuse: ms.HeapInuse, TimeWaitClient: c, TimeWaitServer: s}
}

// bareResult is what a bare client loop measured.
type bareResult struct {
	Requests int64
	Errors   int64
	Elapsed  time.Duration
	CPU      time.Duration
	Lateness latencies
}

func (r *bareResult) rate() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }
func (r *bareResult) cpuPerRequest() time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Requests)
}

// bareClient is the floor: a plain net/http client, one fresh connection
// per request, nothing else.
func bareClient(timeout time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}, Timeout: timeout}
}

func bareGet(c *http.Client, url string) error {
	res, err := c.Get(url)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	return err
}

// bareLoop makes plain HTTP requests, spread over the urls, from workers
// goroutines for d, each request timing out after timeout. With a positive
// interval the requests are paced, one per interval, each worker waiting for
// its slot (and their start lateness measured); with 0 they go back to back:
// the highest rate a plain client reaches on this machine.
func bareLoop(ctx context.Context, urls []string, interval, d, timeout time.Duration, workers int) *bareResult {
	c := bareClient(timeout)
	r := &bareResult{}
	var reqs, errs atomic.Int64
	start := time.Now()
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for slot := w; ctx.Err() == nil; slot += workers {
				if interval > 0 {
					due := start.Add(time.Duration(slot) * interval)
					if due.Sub(start) >= d {
						return
					}
					time.Sleep(time.Until(due))
					r.Lateness.add(time.Since(due))
				} else if time.Since(start) >= d {
					return
				}
				if err := bareGet(c, urls[slot%len(urls)]); err != nil {
					errs.Add(1)
				}
				reqs.Add(1)
			}
		})
	}
	wg.Wait()
	r.CPU = cpuTime() - cpu0
	r.Elapsed = time.Since(start)
	r.Requests, r.Errors = reqs.Load(), errs.Load()
	return r
}

// staticStatus serves fixed pod statuses: every container running and
// started, at 127.0.0.1.
type staticStatus map[types.UID]v1.PodStatus

func (s staticStatus) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	st, ok := s[uid]
	return st, ok
}

// reasons counts the messages of failed and errored probe runs, from the
// Manager's debug and warning logs.
type reasons struct {
	mu sync.Mutex
	n  map[string]int // guarded by mu
}

func (r *reasons) Enabled(context.Context, slog.Level) bool { return true }
func (r *reasons) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *reasons) WithGroup(string) slog.Handler            { return r }
func (r *reasons) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "Probe failed" && rec.Message != "Probe errored" {
		return nil
	}
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "output" || a.Key == "err" {
			msg := a.Value.String()
			// Drop the addresses so that one cause is one line.
			if i := strings.LastIndex(msg, ": "); i >= 0 {
				msg = msg[i+2:]
			}
			r.mu.Lock()
			r.n[msg]++
			r.mu.Unlock()
		}
		return true
	})
	return nil
}

func (r *reasons) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k, v := range r.n {
		out = append(out, fmt.Sprintf("%d× %q", v, k))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// engineResult is what a run of the prober Manager measured.
type engineResult struct {
	Probes      int
	Period      time.Duration
	Runs        int64
	Failed      float64
	Elapsed     time.Duration
	CPU         time.Duration
	Lateness    latencies
	Samples     []sample
	Concurrency int
	Reasons     *reasons
}

func (r *engineResult) rate() float64 { return float64(r.Runs) / r.Elapsed.Seconds() }
func (r *engineResult) cpuPerProbe() time.Duration {
	if r.Runs == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Runs)
}

// engineRun runs probes HTTP liveness probes with the given period and
// timeout (whole seconds) against
// the targets (host:port) for d, sampling resources every sampleEvery.
func engineRun(ctx context.Context, targets []string, ps portSet, probes int, period, timeout, d, sampleEvery time.Duration, concurrency int) (*engineResult, error) {
	r := &engineResult{Probes: probes, Period: period, Concurrency: concurrency, Reasons: &reasons{n: map[string]int{}}}
	var runs atomic.Int64
	status := make(staticStatus, probes)
	reg := prometheus.NewRegistry()
	m, err := prober.New(prober.Config{Concurrency: concurrency}, prober.Deps{
		Status:     status,
		Registerer: reg,
		Logger:     slog.New(r.Reasons),
		OnProbeStart: func(l time.Duration) {
			runs.Add(1)
			r.Lateness.add(l)
		},
	})
	if err != nil {
		return nil, err
	}
	now := metav1.Now()
	pods := make([]*v1.Pod, probes)
	for i := range probes {
		host, portStr, _ := strings.Cut(targets[i%len(targets)], ":")
		port, _ := strconv.Atoi(portStr)
		uid := types.UID(fmt.Sprintf("pod-%d", i))
		pods[i] = &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: "bench", UID: uid},
			Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{
				Name: "app",
				LivenessProbe: &v1.Probe{
					ProbeHandler:   v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(port), Host: host}},
					PeriodSeconds:  int32(period / time.Second),
					TimeoutSeconds: int32(timeout / time.Second),
				},
			}}},
		}
		status[uid] = v1.PodStatus{Phase: v1.PodRunning, PodIP: host, ContainerStatuses: []v1.ContainerStatus{{
			Name: "app", ContainerID: fmt.Sprintf("containerd://c%d", i), Started: ptrTrue(), Ready: true,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
		}}}
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	go func() { // the agent's sync loop: drain the updates
		for {
			select {
			case <-m.Results(prober.Liveness).Updates():
			case <-runCtx.Done():
				return
			}
		}
	}()

	start := time.Now()
	cpu0 := cpuTime()
	for _, p := range pods {
		if err := m.AddPod(p); err != nil {
			return nil, err
		}
	}
	r.Samples = append(r.Samples, takeSample(start, ps))
	var sampling time.Duration // CPU spent sampling, not charged to the engine
	sampleNow := func() {
		c := cpuTime()
		r.Samples = append(r.Samples, takeSample(start, ps))
		sampling += cpuTime() - c
	}
	tick := time.NewTicker(sampleEvery)
	timer := time.NewTimer(d)
loop:
	for {
		select {
		case <-tick.C:
			sampleNow()
		case <-timer.C:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	tick.Stop()
	r.CPU = cpuTime() - cpu0 - sampling
	r.Elapsed = time.Since(start)
	r.Runs = runs.Load()
	r.Samples = append(r.Samples, takeSample(start, ps))
	cancel()
	if err := <-done; err != nil {
		return nil, err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	for _, mf := range mfs {
		if mf.GetName() != "prober_probe_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "result" && l.GetValue() != "successful" {
					r.Failed += mt.GetCounter().GetValue()
				}
			}
		}
	}
	return r, nil
}

func ptrTrue() *bool { t := true; return &t }

// Command prober benchmarks nodekeeper's probe engine against real HTTP
// servers on loopback, next to a bare net/http client loop making the same
// fresh-connection requests (the floor).
//
// The HTTP servers run in a child process (this binary with -serve), so the
// CPU this process reports (getrusage) is the client side only.
//
//	go run ./bench/prober            # quick run, a few seconds
//	go run ./bench/prober -long      # 10,000 probes at 10s for 70s, plus the bare loop
//	go run ./bench/prober -long -max # and the highest rate with p99 lateness <= 10ms
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"
)

func main() {
	var (
		serve       = flag.Bool("serve", false, "internal: run the loopback HTTP servers and print their addresses")
		long        = flag.Bool("long", false, "run the full benchmark: 10,000 probes at 10s for 70s (defaults below are the quick run)")
		probes      = flag.Int("probes", 0, "probes (default 10000 with -long, 500 without)")
		period      = flag.Duration("period", 0, "probe period, whole seconds (default 10s with -long, 1s without)")
		duration    = flag.Duration("duration", 0, "measured engine run (default 70s with -long, 5s without)")
		bareDur     = flag.Duration("bare-duration", 0, "each bare-loop run (default 20s with -long, 3s without)")
		servers     = flag.Int("servers", 16, "loopback HTTP servers (ports) the probes are spread over")
		timeout     = flag.Duration("timeout", time.Second, "probe timeout (whole seconds; the API default is 1s) and bare-request timeout")
		concurrency = flag.Int("concurrency", 0, "prober Config.Concurrency (0: the default)")
		searchMax   = flag.Bool("max", false, "also search the highest probe rate with p99 lateness <= 10ms")
		maxStep     = flag.Duration("max-step", 10*time.Second, "length of each step of the -max search")
		cpuProfile  = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	)
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if *serve {
		if err := runServers(*servers); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	full := *long
	def := func(v *int, l, s int) {
		if *v == 0 {
			*v = map[bool]int{true: l, false: s}[full]
		}
	}
	defD := func(v *time.Duration, l, s time.Duration) {
		if *v == 0 {
			*v = map[bool]time.Duration{true: l, false: s}[full]
		}
	}
	def(probes, 10000, 500)
	defD(period, 10*time.Second, time.Second)
	defD(duration, 70*time.Second, 5*time.Second)
	defD(bareDur, 20*time.Second, 3*time.Second)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	addrs, child, err := startServerProcess(*servers)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer child()
	err = report(ctx, os.Stdout, addrs, options{
		probes: *probes, period: *period, timeout: *timeout, duration: *duration, bareDuration: *bareDur,
		concurrency: *concurrency, searchMax: *searchMax, maxStep: *maxStep,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		child()
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// runServers serves n loopback HTTP servers, prints their addresses, one a
// line, and returns when stdin closes (the parent is gone).
func runServers(n int) error {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		go http.Serve(l, h)
		fmt.Println(l.Addr().String())
	}
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// startServerProcess runs this binary with -serve and returns the server
// addresses and a function that stops the child.
func startServerProcess(n int) ([]string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(self, "-serve", "-servers", strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	stopChild := func() {
		stdin.Close()
		cmd.Wait()
	}
	sc := bufio.NewScanner(stdout)
	var addrs []string
	for len(addrs) < n && sc.Scan() {
		addrs = append(addrs, sc.Text())
	}
	if len(addrs) < n {
		stopChild()
		return nil, nil, fmt.Errorf("server process gave %d of %d addresses: %v", len(addrs), n, sc.Err())
	}
	return addrs, stopChild, nil
}

type options struct {
	probes       int
	period       time.Duration
	timeout      time.Duration // probe and bare-request timeout
	duration     time.Duration
	bareDuration time.Duration
	concurrency  int
	searchMax    bool
	maxStep      time.Duration
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
func mib(b int64) string        { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
func urlsOf(addrs []string) []string {
	u := make([]string, len(addrs))
	for i, a := range addrs {
		u[i] = "http://" + a + "/healthz"
	}
	return u
}

// report runs the phases and writes a markdown report to w.
func report(ctx context.Context, w io.Writer, addrs []string, o options) error {
	urls := urlsOf(addrs)
	ps := newPortSet(addrs)
	c0, s0 := timeWaitSockets(ps)
	rate := float64(o.probes) / o.period.Seconds()
	fmt.Fprintf(w, "GOMAXPROCS=%d, %s/%s, %s; %d servers on 127.0.0.1 in a child process\n\n",
		runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version(), len(addrs))

	e, err := engineRun(ctx, addrs, ps, o.probes, o.period, o.timeout, o.duration, 5*time.Second, o.concurrency)
	if err != nil {
		return err
	}
	p50, p99, pmax := e.Lateness.percentiles()
	fmt.Fprintf(w, "engine: %d HTTP probes, period %v, %v: %d runs, %.0f probes/s, %.0f failed/unknown, CPU/probe %s, start lateness p50 %s p99 %s max %s\n\n",
		e.Probes, e.Period, e.Elapsed.Round(time.Millisecond), e.Runs, e.rate(), e.Failed, us(e.cpuPerProbe()),
		ms(p50), ms(p99), ms(pmax))
	if e.Failed > 0 {
		fmt.Fprintf(w, "failure causes: %s\n\n", e.Reasons)
	}
	fmt.Fprintln(w, "| t | goroutines | RSS | heap in use | TIME-WAIT client side | TIME-WAIT server side |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, s := range e.Samples {
		fmt.Fprintf(w, "| %v | %d | %s | %s | %d | %d |\n", s.At, s.Goroutines, mib(s.RSS), mib(int64(s.HeapInuse)), s.TimeWaitClient, s.TimeWaitServer)
	}
	fmt.Fprintln(w)

	best := 0.0
	if o.searchMax {
		if err := searchMax(ctx, w, addrs, ps, o, &best); err != nil {
			return err
		}
	}
	bare := bareLoop(ctx, urls, time.Duration(float64(time.Second)/rate), o.bareDuration, o.timeout, 64)
	bp50, bp99, _ := bare.Lateness.percentiles()
	fmt.Fprintf(w, "bare loop, paced at %.0f req/s for %v: %d requests (%d errors), %.0f req/s, CPU/request %s, start lateness p50 %s p99 %s\n",
		rate, o.bareDuration, bare.Requests, bare.Errors, bare.rate(), us(bare.cpuPerRequest()), ms(bp50), ms(bp99))
	c1, s1 := timeWaitSockets(ps)
	fmt.Fprintf(w, "TIME-WAIT sockets after the paced bare loop: client side %d, server side %d (before: %d, %d)\n", c1, s1, c0, s0)
	bmax := bareLoop(ctx, urls, 0, o.bareDuration, o.timeout, 2*runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "bare loop, back to back (%d goroutines) for %v: %.0f req/s (%d errors), CPU/request %s\n\n",
		2*runtime.GOMAXPROCS(0), o.bareDuration, bmax.rate(), bmax.Errors, us(bmax.cpuPerRequest()))

	fmt.Fprintf(w, "engine CPU/probe %s = %.2f× the paced bare loop's CPU/request\n", us(e.cpuPerProbe()), float64(e.cpuPerProbe())/float64(bare.cpuPerRequest()))
	if o.searchMax {
		fmt.Fprintf(w, "highest sustained: %.0f probes/s = %.2f× the bare loop's back-to-back rate (%.0f req/s)\n", best, best/bmax.rate(), bmax.rate())
	}
	return nil
}

// searchMax runs the engine at rising rates (period 1s) until the p99 start
// lateness passes 10 ms or more than 0.1% of the runs fail, and prints each
// step.
func searchMax(ctx context.Context, w io.Writer, addrs []string, ps portSet, o options, best *float64) error {
	fmt.Fprintf(w, "highest rate with p99 start lateness <= 10 ms (period 1s, %v per step):\n\n", o.maxStep)
	fmt.Fprintln(w, "| target probes/s | achieved | CPU/probe | p50 | p99 | failed | ok |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for r := 1000.0; r <= 20000 && ctx.Err() == nil; r *= 1.25 {
		n := int(r)
		e, err := engineRun(ctx, addrs, ps, n, time.Second, o.timeout, o.maxStep, o.maxStep, o.concurrency)
		if err != nil {
			return err
		}
		p50, p99, _ := e.Lateness.percentiles()
		ok := p99 <= 10*time.Millisecond && e.Failed <= 0.001*float64(e.Runs) && e.rate() >= 0.95*float64(n)
		fmt.Fprintf(w, "| %d | %.0f | %s | %s | %s | %.0f | %v |\n", n, e.rate(), us(e.cpuPerProbe()), ms(p50), ms(p99), e.Failed, ok)
		if e.Failed > 0 {
			fmt.Fprintf(w, "\nfailure causes: %s\n\n", e.Reasons)
		}
		if !ok {
			break
		}
		*best = e.rate()
	}
	fmt.Fprintln(w)
	return nil
}

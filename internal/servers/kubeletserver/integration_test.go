package kubeletserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// helperSource is the test container's program:
//
//	helper serve PORT   print "ready", then accept TCP on 127.0.0.1:PORT,
//	                    print "conn N" per connection and echo it
//	helper say OUT ERR CODE   write OUT to stdout, ERR to stderr, exit CODE
//	helper cat          copy stdin to stdout
const helperSource = `package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

func main() {
	switch os.Args[1] {
	case "serve":
		ln, err := net.Listen("tcp", "127.0.0.1:"+os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("ready")
		go func() {
			for n := 1; ; n++ {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Printf("conn %d\n", n)
				go func() { io.Copy(c, c); c.Close() }()
			}
		}()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
	case "say":
		fmt.Print(os.Args[2])
		fmt.Fprint(os.Stderr, os.Args[3])
		n, _ := strconv.Atoi(os.Args[4])
		os.Exit(n)
	case "cat":
		io.Copy(os.Stdout, os.Stdin)
	}
}
`

const helperRef = "docker.io/nodekeeper/kubeletserver-helper:1"

var (
	helperOnce sync.Once
	helperBin  []byte
	helperErr  error
)

// buildHelper builds helperSource once per test process.
func buildHelper() ([]byte, error) {
	helperOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nk-ksh-")
		if err != nil {
			helperErr = err
			return
		}
		defer os.RemoveAll(dir)
		for name, data := range map[string]string{"main.go": helperSource, "go.mod": "module helper\n\ngo 1.21\n"} {
			if helperErr = os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); helperErr != nil {
				return
			}
		}
		cmd := exec.Command(toolbuild.GoTool(), "build", "-trimpath", "-ldflags=-s -w", "-o", "helper", ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			helperErr = fmt.Errorf("build helper: %v: %s", err, out)
			return
		}
		helperBin, helperErr = os.ReadFile(filepath.Join(dir, "helper"))
	})
	return helperBin, helperErr
}

// criRuntime is the Runtime over a real CRI endpoint: internal/machine/cri's client
// for the unary calls it has, the generated gRPC client for the streaming
// calls.
type criRuntime struct {
	*cri.Client
	rt runtimeapi.RuntimeServiceClient
}

func (r criRuntime) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return r.rt.Exec(ctx, req)
}

func (r criRuntime) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return r.rt.Attach(ctx, req)
}

func (r criRuntime) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return r.rt.PortForward(ctx, req)
}

// node is a containerd with a pod "default/web" whose container "app" runs
// "helper serve PORT" (host network), served by a kubelet API server.
type node struct {
	base   string
	port   int // the TCP port app listens on
	config *rest.Config
	pod    *v1.Pod
	rt     criRuntime
	server *Server
	// stop ends the server's Run and returns its error (also at cleanup).
	stop func() error
}

// pemCert returns cert's certificate and key as PEM.
func pemCert(tb testing.TB, cert tls.Certificate) (certPEM, keyPEM []byte) {
	tb.Helper()
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startNode starts containerd, the pod and the server. The server trusts
// client certificates of a CA it makes; config presents one for the user
// "kube-apiserver-kubelet-client", whom its authorizer allows. mod, if set,
// changes the server's Config and Deps before New.
func startNode(tb testing.TB, mod func(*Config, *Deps)) *node {
	tb.Helper()
	c := containerdtest.Start(tb)
	bin, err := buildHelper()
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), "helper.tar")
	b, err := ocibuild.WriteFile(path, ocibuild.Image{
		Ref: helperRef, Files: []ocibuild.File{{Path: "/helper", Mode: 0o755, Data: bin}}, Entrypoint: []string{"/helper"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	c.Import(tb, containerdtest.Built{Ref: b.Ref, Path: path, ID: b.ID})
	const uid = "uid-web"
	port := freePort(tb)
	sb := c.RunPod(tb, "web", uid)
	id := c.CreateContainer(tb, sb, "app", 0, helperRef, []string{"serve", strconv.Itoa(port)}, true)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: uid},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: helperRef}}},
		Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{
			Name: "app", ContainerID: "containerd://" + id, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}},
		}}},
	}
	conn, err := grpc.NewClient(c.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	rt := criRuntime{Client: c.CRI, rt: runtimeapi.NewRuntimeServiceClient(conn)}

	ca := newTestCA(tb, "kubelet-client-ca")
	certDir := filepath.Join(tb.TempDir(), "pki")
	cfg := Config{
		NodeName: "node-1", Address: "127.0.0.1", CertDir: certDir, Hostname: "localhost", NodeIPs: loopback,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:    kubeletv1beta1.KubeletX509Authentication{ClientCAFile: ca.File},
			Webhook: kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
		},
	}
	deps := Deps{
		Pods: func() []*v1.Pod { return []*v1.Pod{pod} }, Runtime: rt,
		Authorizer: &seenAuthorizer{allow: map[string]bool{"kube-apiserver-kubelet-client": true}},
		Logger:     testLogger(tb),
	}
	if mod != nil {
		mod(&cfg, &deps)
	}
	s, err := New(cfg, deps)
	if err != nil {
		tb.Fatal(err)
	}
	base, stop := startServer(tb, s)
	tb.Cleanup(func() {
		if err := stop(); err != nil {
			tb.Error(err)
		}
	})
	certPEM, keyPEM := pemCert(tb, ca.issue(tb, "kube-apiserver-kubelet-client", "system:masters"))
	return &node{
		base: base, port: port, pod: pod, rt: rt, server: s, stop: stop,
		config: &rest.Config{Host: base, TLSClientConfig: rest.TLSClientConfig{
			CAFile: filepath.Join(certDir, selfSignedCert), CertData: certPEM, KeyData: keyPEM,
		}},
	}
}

// execURL is the exec URL of app for command, with stream flags.
func (n *node) execURL(flags string, command ...string) *url.URL {
	q := url.Values{"command": command}
	u, _ := url.Parse(n.base + "/exec/default/web/app?" + q.Encode() + "&" + flags)
	return u
}

// exitCode is the exit status err carries, 0 for nil, -1 for other errors.
func exitCode(err error) int {
	var ee utilexec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitStatus()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestStreaming runs exec over SPDY and WebSocket (the v5 protocol, which the
// server translates), port-forwards over SPDY and tunnelled WebSocket, and
// reads, tails and follows logs, against a real containerd.
func TestStreaming(t *testing.T) {
	n := startNode(t, nil)
	ctx := t.Context()

	spdyExec := func(u *url.URL) (remotecommand.Executor, error) {
		return remotecommand.NewSPDYExecutor(n.config, "POST", u)
	}
	wsExec := func(u *url.URL) (remotecommand.Executor, error) {
		return remotecommand.NewWebSocketExecutor(n.config, "GET", u.String())
	}
	for _, proto := range []struct {
		name string
		ex   func(*url.URL) (remotecommand.Executor, error)
	}{{"spdy", spdyExec}, {"websocket", wsExec}} {
		t.Run("exec/"+proto.name, func(t *testing.T) {
			ex, err := proto.ex(n.execURL("output=1&error=1", "/helper", "say", "to out", "to err", "3"))
			if err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
			if got := exitCode(err); got != 3 {
				t.Errorf("exit code = %d (%v), want 3", got, err)
			}
			if out.String() != "to out" || errOut.String() != "to err" {
				t.Errorf("stdout, stderr = %q, %q; want %q, %q", out.String(), errOut.String(), "to out", "to err")
			}

			ex, err = proto.ex(n.execURL("input=1&output=1", "/helper", "cat"))
			if err != nil {
				t.Fatal(err)
			}
			out.Reset()
			if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("hello\nworld\n"), Stdout: &out}); err != nil {
				t.Fatalf("cat: %v", err)
			}
			if out.String() != "hello\nworld\n" {
				t.Errorf("cat's stdout = %q, want its stdin", out.String())
			}

			// On a terminal, with a resize.
			ex, err = proto.ex(n.execURL("output=1&tty=1", "/helper", "say", "on a tty", "", "5"))
			if err != nil {
				t.Fatal(err)
			}
			out.Reset()
			sizes := make(chan remotecommand.TerminalSize, 1)
			sizes <- remotecommand.TerminalSize{Width: 100, Height: 30}
			close(sizes)
			err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Tty: true, TerminalSizeQueue: sizeQueue(sizes)})
			if got := exitCode(err); got != 5 || !strings.Contains(out.String(), "on a tty") {
				t.Errorf("tty exec = exit %d (%v), %q; want 5 and the output", got, err, out.String())
			}
		})
	}

	// Log lines: "ready", then "conn N" per connection to the port.
	c := httpsClientFor(t, n.config)
	logs := func(query string) string {
		t.Helper()
		code, body := get(t, c, n.base+"/containerLogs/default/web/app"+query)
		if code != 200 {
			t.Fatalf("logs%s = %d %q", query, code, body)
		}
		return body
	}
	waitLog := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(logs(""), want) {
			if time.Now().After(deadline) {
				t.Fatalf("log never showed %q; it is %q", want, logs(""))
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	waitLog("ready\n")

	t.Run("logs/follow", func(t *testing.T) {
		req, err := http.NewRequestWithContext(ctx, "GET", n.base+"/containerLogs/default/web/app?follow=true&tailLines=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		if l, err := r.ReadString('\n'); err != nil || l != "ready\n" {
			t.Fatalf("first followed line = %q, %v; want the tail %q", l, err, "ready\n")
		}
		// A connection to the port (host network) makes the container log a line.
		conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)))
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
		if l, err := r.ReadString('\n'); err != nil || l != "conn 1\n" {
			t.Fatalf("followed line = %q, %v; want %q", l, err, "conn 1\n")
		}
	})

	for _, pf := range []struct {
		name   string
		dialer func(u *url.URL) (httpstream.Dialer, error)
	}{
		{"spdy", func(u *url.URL) (httpstream.Dialer, error) {
			tr, up, err := spdy.RoundTripperFor(n.config)
			if err != nil {
				return nil, err
			}
			return spdy.NewDialer(up, &http.Client{Transport: tr}, "POST", u), nil
		}},
		{"websocket", func(u *url.URL) (httpstream.Dialer, error) {
			return portforward.NewSPDYOverWebsocketDialer(u, n.config)
		}},
	} {
		t.Run("portForward/"+pf.name, func(t *testing.T) {
			u, _ := url.Parse(n.base + "/portForward/default/web")
			d, err := pf.dialer(u)
			if err != nil {
				t.Fatal(err)
			}
			stop, ready := make(chan struct{}), make(chan struct{})
			var out, errOut bytes.Buffer
			fw, err := portforward.NewOnAddresses(d, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(n.port)}, stop, ready, &out, &errOut)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- fw.ForwardPorts() }()
			defer func() {
				close(stop)
				if err := <-done; err != nil {
					t.Errorf("ForwardPorts: %v", err)
				}
			}()
			select {
			case <-ready:
			case err := <-done:
				done <- err
				t.Fatalf("port-forward ended before ready: %v (%s)", err, errOut.String())
			case <-time.After(20 * time.Second):
				t.Fatal("port-forward not ready in 20s")
			}
			ports, err := fw.GetPorts()
			if err != nil || len(ports) != 1 {
				t.Fatalf("ports = %v, %v", ports, err)
			}
			conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.WriteString(conn, "ping\n"); err != nil {
				t.Fatal(err)
			}
			if l, err := bufio.NewReader(conn).ReadString('\n'); err != nil || l != "ping\n" {
				t.Fatalf("echo through the forwarded port = %q, %v; want %q", l, err, "ping\n")
			}
		})
	}

	t.Run("logs", func(t *testing.T) {
		waitLog("conn 3\n") // the follow's connection and two port-forwards
		if got, want := logs(""), "ready\nconn 1\nconn 2\nconn 3\n"; got != want {
			t.Errorf("logs = %q, want %q", got, want)
		}
		if got, want := logs("?tailLines=2"), "conn 2\nconn 3\n"; got != want {
			t.Errorf("tailLines=2 = %q, want %q", got, want)
		}
		got := logs("?timestamps=true&tailLines=1")
		if !timestamped.MatchString(got) || !strings.HasSuffix(got, " conn 3\n") {
			t.Errorf("timestamps=true&tailLines=1 = %q, want an RFC 3339 time and \"conn 3\"", got)
		}
		if got, want := logs("?limitBytes=8"), "ready\nco"; got != want {
			t.Errorf("limitBytes=8 = %q, want %q", got, want)
		}
	})

	// Attach to app's output: a connection's line shows up in it.
	t.Run("attach", func(t *testing.T) {
		u, _ := url.Parse(n.base + "/attach/default/web/app?output=1&error=1")
		ex, err := remotecommand.NewSPDYExecutor(n.config, "POST", u)
		if err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		outR, outW := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- ex.StreamWithContext(actx, remotecommand.StreamOptions{Stdout: outW, Stderr: io.Discard})
		}()
		lines := make(chan string, 10)
		go func() {
			r := bufio.NewReader(outR)
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					close(lines)
					return
				}
				lines <- l
			}
		}()
		// The attach may not be in place when the first connection comes:
		// connect until a line arrives.
		deadline := time.After(20 * time.Second)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for got := false; !got; {
			select {
			case l := <-lines:
				if !strings.HasPrefix(l, "conn ") {
					t.Fatalf("attached output = %q, want a connection's line", l)
				}
				got = true
			case <-tick.C:
				conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)))
				if err != nil {
					t.Fatal(err)
				}
				conn.Close()
			case err := <-done:
				t.Fatalf("attach ended: %v", err)
			case <-deadline:
				t.Fatal("no output through attach in 20s")
			}
		}
		cancel()
		outW.Close()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("attach did not end 20s after its context")
		}
	})

	t.Run("not found", func(t *testing.T) {
		for _, tc := range []struct {
			path, want string
		}{
			{"/exec/default/nope/app?command=x&output=1", "pod does not exist"},
			{"/exec/default/web/nope?command=x&output=1", `container not found ("nope")`},
			{"/attach/default/web/nope?output=1", "container nope not found in pod web_default"},
			{"/portForward/default/nope", "pod does not exist"},
			{"/portForward/default/web/other-uid", "pod not found"},
			{"/containerLogs/default/web/nope", `container "nope" not found in pod "web"`},
		} {
			code, body := get(t, c, n.base+tc.path)
			if code != 404 || body != tc.want {
				t.Errorf("GET %s = %d %q, want 404 %q", tc.path, code, body, tc.want)
			}
		}
		if code, body := get(t, c, n.base+"/exec/default/web/app?command=x"); code != 400 || body != "you must specify at least 1 of stdin, stdout, stderr" {
			t.Errorf("exec without streams = %d %q, want 400", code, body)
		}
	})

	// Run ends with an exec session and a followed log still open, and
	// ends both.
	t.Run("shutdown", func(t *testing.T) {
		ex, err := remotecommand.NewSPDYExecutor(n.config, "POST", n.execURL("input=1&output=1", "/helper", "cat"))
		if err != nil {
			t.Fatal(err)
		}
		stdinR, stdinW := io.Pipe()
		stdoutR, stdoutW := io.Pipe()
		execDone := make(chan error, 1)
		go func() {
			execDone <- ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: stdoutW})
		}()
		defer stdinW.Close()
		if _, err := io.WriteString(stdinW, "up\n"); err != nil {
			t.Fatal(err)
		}
		if l, err := bufio.NewReader(stdoutR).ReadString('\n'); err != nil || l != "up\n" {
			t.Fatalf("exec session: %q, %v", l, err)
		}
		req, err := http.NewRequestWithContext(ctx, "GET", n.base+"/containerLogs/default/web/app?follow=true", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := n.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		select {
		case err := <-execDone:
			t.Logf("exec session ended with the server: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("exec session still open 20s after Run returned")
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Logf("followed log ended with the server: %v", err)
		}
	})
}

// httpsClientFor is an HTTPS client with config's TLS settings.
func httpsClientFor(tb testing.TB, config *rest.Config) *http.Client {
	tb.Helper()
	tr, err := rest.TransportFor(config)
	if err != nil {
		tb.Fatal(err)
	}
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

var timestamped = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z `)

// BenchmarkExec measures one exec round trip through the server to a real
// containerd: the request, CRI Exec, the proxied upgrade, running
// "helper say" in the container, its output and exit code.
func BenchmarkExec(b *testing.B) {
	n := startNode(b, nil)
	u := n.execURL("output=1&error=1", "/helper", "say", "out", "err", "0")
	for _, proto := range []struct {
		name string
		ex   func() (remotecommand.Executor, error)
	}{
		{"spdy", func() (remotecommand.Executor, error) { return remotecommand.NewSPDYExecutor(n.config, "POST", u) }},
		{"websocket", func() (remotecommand.Executor, error) {
			return remotecommand.NewWebSocketExecutor(n.config, "GET", u.String())
		}},
		// The baseline: CRI Exec and SPDY straight to containerd's streaming
		// server, without this server.
		{"direct-cri-spdy", func() (remotecommand.Executor, error) {
			resp, err := n.rt.Exec(b.Context(), &runtimeapi.ExecRequest{
				ContainerId: strings.TrimPrefix(n.pod.Status.ContainerStatuses[0].ContainerID, "containerd://"),
				Cmd:         []string{"/helper", "say", "out", "err", "0"}, Stdout: true, Stderr: true,
			})
			if err != nil {
				return nil, err
			}
			cu, err := url.Parse(resp.GetUrl())
			if err != nil {
				return nil, err
			}
			return remotecommand.NewSPDYExecutor(&rest.Config{Host: cu.Scheme + "://" + cu.Host}, "POST", cu)
		}},
	} {
		b.Run(proto.name, func(b *testing.B) {
			for b.Loop() {
				ex, err := proto.ex()
				if err != nil {
					b.Fatal(err)
				}
				var out, errOut bytes.Buffer
				if err := ex.StreamWithContext(b.Context(), remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
					b.Fatal(err)
				}
				if out.String() != "out" || errOut.String() != "err" {
					b.Fatalf("stdout, stderr = %q, %q", out.String(), errOut.String())
				}
			}
		})
	}
}

package kubeletserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	certutil "k8s.io/client-go/util/cert"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// testCA is a certificate authority that issues client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA's PEM file, for clientCAFile.
	File string
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, File: file}
}

// issue returns a client certificate for user cn in groups.
func (ca *testCA) issue(t testing.TB, cn string, groups ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn, Organization: groups},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// runServer runs s until the test ends and returns its base URL.
func runServer(t testing.TB, s *Server) string {
	t.Helper()
	base, stop := startServer(t, s)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return base
}

// startServer runs s and returns its base URL and a function that ends Run
// and returns its error, or an error if it did not return within 30s.
func startServer(t testing.TB, s *Server) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				runErr = errors.New("Run did not return 30s after its context ended")
			}
		})
		return runErr
	}
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("server not ready in 10s")
	}
	if s.Addr() == "" {
		t.Fatalf("server did not listen: %v", <-done)
	}
	return "https://" + s.Addr(), stop
}

// httpsClient trusts the server's self-signed certificate in certDir and
// presents cert, if any.
func httpsClient(t *testing.T, certDir string, cert *tls.Certificate) *http.Client {
	t.Helper()
	pool, err := certutil.NewPool(filepath.Join(certDir, selfSignedCert))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 60 * time.Second}
}

// get does GET url with c and returns the status and body.
func get(t testing.TB, c *http.Client, url string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fakeRuntime is a Runtime of function fields; a nil field fails the call.
type fakeRuntime struct {
	status      func(id string) (*runtimeapi.ContainerStatusResponse, error)
	sandboxes   func(f *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	exec        func(r *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	attach      func(r *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	portForward func(r *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
}

var errNoFake = os.ErrInvalid

func (f fakeRuntime) ContainerStatus(_ context.Context, id string, _ bool) (*runtimeapi.ContainerStatusResponse, error) {
	if f.status == nil {
		return nil, errNoFake
	}
	return f.status(id)
}

func (f fakeRuntime) ListPodSandbox(_ context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	if f.sandboxes == nil {
		return nil, errNoFake
	}
	return f.sandboxes(filter)
}

func (f fakeRuntime) Exec(_ context.Context, r *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if f.exec == nil {
		return nil, errNoFake
	}
	return f.exec(r)
}

func (f fakeRuntime) Attach(_ context.Context, r *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if f.attach == nil {
		return nil, errNoFake
	}
	return f.attach(r)
}

func (f fakeRuntime) PortForward(_ context.Context, r *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if f.portForward == nil {
		return nil, errNoFake
	}
	return f.portForward(r)
}

var loopback = []net.IP{net.ParseIP("127.0.0.1")}

func noPods() []*v1.Pod { return nil }

package apiservertest

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestServingCertificate checks the names the serving certificate is valid
// for, and that the CA file verifies it.
func TestServingCertificate(t *testing.T) {
	t.Parallel()
	s := &Server{dir: t.TempDir(), advertise: net.ParseIP("192.0.2.7")}
	if err := s.writeCredentials("10.97.0.0/24"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(s.path("serving.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	ca, err := os.ReadFile(s.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(ca)
	for _, host := range []string{"127.0.0.1", "192.0.2.7", "10.97.0.1", "localhost", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("serving certificate for %s: %v", host, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "10.97.0.2", Roots: roots}); err == nil {
		t.Error("serving certificate valid for 10.97.0.2, want only the first service IP")
	}
	tokens, err := os.ReadFile(s.path("tokens.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s.adminToken+",admin,admin,system:masters\n", string(tokens)); diff != "" {
		t.Errorf("token file (-want +got):\n%s", diff)
	}
}

func TestBadServiceCIDR(t *testing.T) {
	t.Parallel()
	s := &Server{dir: t.TempDir(), advertise: net.ParseIP("192.0.2.7")}
	err := s.writeCredentials("10.97.0.0/33")
	if err == nil || !strings.Contains(err.Error(), `service cluster IP range "10.97.0.0/33"`) {
		t.Errorf("got %v, want an error naming the range", err)
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\nd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		n    int
		want string
	}{
		{name: "all", n: 10, want: "a\nb\nc\nd"},
		{name: "last two", n: 2, want: "... (2 lines before)\nc\nd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, tail(path, tc.n)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

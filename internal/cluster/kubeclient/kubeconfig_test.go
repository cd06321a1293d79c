package kubeclient

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
)

// kubeconfig is a kubeconfig whose user names a token file and a client
// certificate and key, and whose cluster names a CA file, all relative paths.
const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: ca.crt}
users:
- name: u
  user: {tokenFile: token, client-certificate: tls.crt, client-key: tls.key}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

// writeKubeconfig writes the kubeconfig and the files it names into a new
// directory, then replaces those of replace (name → content; "" removes).
func writeKubeconfig(t *testing.T, replace map[string]string) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	files := map[string]string{"kubeconfig": kubeconfig, "ca.crt": "ca", "token": "tok", "tls.crt": "crt", "tls.key": "key"}
	for name, body := range replace {
		files[name] = body
	}
	for name, body := range files {
		if body == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, filepath.Join(dir, "kubeconfig")
}

// TestLoadKubeconfig: the files a kubeconfig names are resolved against its
// directory, the token file is read into the token, the others stay paths.
func TestLoadKubeconfig(t *testing.T) {
	t.Parallel()
	dir, path := writeKubeconfig(t, nil)
	rc, err := LoadKubeconfig(t.Context(), path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://127.0.0.1:6443" || rc.BearerToken != "tok" || rc.BearerTokenFile != filepath.Join(dir, "token") ||
		rc.CAFile != filepath.Join(dir, "ca.crt") || rc.CertFile != filepath.Join(dir, "tls.crt") || rc.KeyFile != filepath.Join(dir, "tls.key") {
		t.Errorf("config = host %q token %q tokenFile %q CA %q cert %q key %q", rc.Host, rc.BearerToken, rc.BearerTokenFile, rc.CAFile, rc.CertFile, rc.KeyFile)
	}
}

// TestLoadKubeconfigBad: each bad kubeconfig is an error naming the file
// (and the field of a named file), read within the limit.
func TestLoadKubeconfigBad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		replace map[string]string
		link    map[string]string // name → target of a symbolic link
		want    []string
	}{
		{"malformed", map[string]string{"kubeconfig": "clusters: [\n"}, nil, []string{"kubeconfig: "}},
		{"too large", map[string]string{"kubeconfig": kubeconfig + strings.Repeat("#", 1000)}, nil,
			[]string{"kubeconfig: larger than the input size limit of 1k (1000 bytes"}},
		{"the kubeconfig is /dev/zero", map[string]string{"kubeconfig": ""}, map[string]string{"kubeconfig": "/dev/zero"},
			[]string{"kubeconfig: larger than the input size limit of 1k (1000 bytes"}},
		{"missing CA file", map[string]string{"ca.crt": ""}, nil, []string{"kubeconfig: clusters[c].certificate-authority: ", "ca.crt", "no such file"}},
		{"token file too large", map[string]string{"token": strings.Repeat("t", 1001)}, nil,
			[]string{"kubeconfig: users[u].tokenFile: ", "token: larger than the input size limit of 1k (1000 bytes"}},
		{"client key is /dev/zero", map[string]string{"tls.key": ""}, map[string]string{"tls.key": "/dev/zero"},
			[]string{"kubeconfig: users[u].client-key: ", "tls.key: not a regular file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, path := writeKubeconfig(t, tc.replace)
			for name, target := range tc.link {
				if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := LoadKubeconfig(t.Context(), path, 1000)
			if err == nil {
				t.Fatal("LoadKubeconfig = nil error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestLoadKubeconfigFIFO: a kubeconfig, or a file it names, that is a FIFO
// without a writer does not block past ctx: the named file is refused at
// once, the kubeconfig's read ends with ctx.
func TestLoadKubeconfigFIFO(t *testing.T) {
	t.Parallel()
	t.Run("named file", func(t *testing.T) {
		t.Parallel()
		dir, path := writeKubeconfig(t, map[string]string{"ca.crt": ""})
		if err := syscall.Mkfifo(filepath.Join(dir, "ca.crt"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadKubeconfig(t.Context(), path, 0)
		if err == nil || !strings.Contains(err.Error(), "ca.crt: not a regular file") {
			t.Fatalf("LoadKubeconfig = %v, want the FIFO refused", err)
		}
	})
	t.Run("kubeconfig", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "kubeconfig")
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := LoadKubeconfig(ctx, path, 0)
			done <- err
		}()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("LoadKubeconfig = %v, want context.Canceled", err)
			}
		case <-time.After(time.Second):
			t.Fatal("LoadKubeconfig still blocked on the FIFO 1 s after ctx ended")
		}
	})
}

// TestLoadKubeconfigDefaultLimit: without a limit the kubeconfig may be
// decode.DefaultMaxConfigSize large, not more.
func TestLoadKubeconfigDefaultLimit(t *testing.T) {
	t.Parallel()
	_, err := LoadKubeconfig(t.Context(), "/dev/zero", 0)
	var tl *decode.TooLargeError
	if !errors.As(err, &tl) || tl.Limit != decode.DefaultMaxConfigSize {
		t.Fatalf("LoadKubeconfig(/dev/zero) = %v, want too large past %d bytes", err, decode.DefaultMaxConfigSize)
	}
}

package main

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/servers/server"
	"github.com/nodekeeper/nodekeeper/internal/testenv/rawget"
)

// nodekeeper kubeconfig prints a kubeconfig of the agent's read-only port
// (found in the configuration the socket serves) through which client-go,
// as kubectl get --raw, reads /pods and /stats/summary; with the port off it
// exits 1 naming the field to set and what it exposes.
func TestKubeconfig(t *testing.T) {
	t.Parallel()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"}}
	readOnly := serve(t, server.Deps{
		Pods: func() []*v1.Pod { return []*v1.Pod{pod} },
		Summary: func(context.Context) (*statsapi.Summary, error) {
			return &statsapi.Summary{Node: statsapi.NodeStats{NodeName: "n1"}}, nil
		},
	})
	u, err := url.Parse(readOnly)
	if err != nil {
		t.Fatal(err)
	}
	configz := func(port int, address string) func() any {
		return func() any {
			c := map[string]any{"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1", "readOnlyPort": port}
			if address != "" {
				c["address"] = address
			}
			return c
		}
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}

	_, sock := serveSocket(t, server.Deps{Configz: configz(port, "0.0.0.0")})
	code, out, errOut := runCLI(t, "kubeconfig", "--socket", sock)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "server: http://127.0.0.1:"+u.Port()+"\n") {
		t.Errorf("kubeconfig:\n%s\nwant the server http://127.0.0.1:%s", out, u.Port())
	}
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	var pods v1.PodList
	if err := json.Unmarshal(rawget.Get(t, file, "/pods"), &pods); err != nil || len(pods.Items) != 1 || pods.Items[0].Name != "web" {
		t.Errorf("/pods through the kubeconfig: %v, %+v", err, pods.Items)
	}
	var sum statsapi.Summary
	if err := json.Unmarshal(rawget.Get(t, file, "/stats/summary"), &sum); err != nil || sum.Node.NodeName != "n1" {
		t.Errorf("/stats/summary through the kubeconfig: %v, node %q", err, sum.Node.NodeName)
	}

	_, off := serveSocket(t, server.Deps{Configz: configz(0, "")})
	code, out, errOut = runCLI(t, "kubeconfig", "--socket", off)
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "readOnlyPort: 0") ||
		!strings.Contains(errOut, "set readOnlyPort") || !strings.Contains(errOut, "anyone on the node can read every pod") {
		t.Errorf("port off: exit %d, stdout %q, stderr %q; want exit 1 and one line naming readOnlyPort and what it exposes", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "kubeconfig", "--server", readOnly); code != exitUsage || !strings.Contains(errOut, "only through the running nodekeeper's unix socket") {
		t.Errorf("--server: exit %d, stderr %q; want %d, refused", code, errOut, exitUsage)
	}
}

func TestReadOnlyHost(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1", "127.0.0.1": "127.0.0.1", "10.0.0.5": "10.0.0.5"} {
		if got := readOnlyHost(in); got != want {
			t.Errorf("readOnlyHost(%q) = %q, want %q", in, got, want)
		}
	}
}

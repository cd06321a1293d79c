package daemon

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodekeeper/nodekeeper/internal/config"
)

// TestFatalListeners: the read-only port when set, the kubelet API only in a
// cluster with enableServer, never the healthz port (it retries).
func TestFatalListeners(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		readOnly   int32
		kubeconfig string
		server     bool
		want       []string
	}{
		{name: "standalone, read-only port off", server: true},
		{name: "standalone, read-only port on", readOnly: 10255, server: true, want: []string{"readOnlyPort 127.0.0.1:10255"}},
		{name: "cluster", kubeconfig: "kc", server: true, want: []string{"port 0.0.0.0:10250"}},
		{name: "cluster, server off", kubeconfig: "kc"},
		{name: "cluster and read-only port", readOnly: 10255, kubeconfig: "kc", server: true,
			want: []string{"readOnlyPort 127.0.0.1:10255", "port 0.0.0.0:10250"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			cfg.Agent.ReadOnlyPort = tc.readOnly
			cfg.Cluster.EnableServer = tc.server
			r := newRoot(Options{Config: cfg, Kubeconfig: tc.kubeconfig})
			var got []string
			for _, l := range r.fatalListeners() {
				got = append(got, l.field+" "+l.addr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("fatalListeners (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCheckListenersTaken: a port another socket listens on is an error
// naming the file, the field, the port and the address; free ports pass.
func TestCheckListenersTaken(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := strconv.Itoa(held.Addr().(*net.TCPAddr).Port)
	free := listener{field: "port", what: "the kubelet API", addr: "127.0.0.1:0"}
	taken := listener{field: "readOnlyPort", what: "the read-only port", addr: held.Addr().String()}
	if err := checkListeners("k.yaml", []listener{free}); err != nil {
		t.Fatalf("a free port: %v", err)
	}
	err = checkListeners("k.yaml", []listener{free, taken})
	if err == nil {
		t.Fatalf("port %s is held, checkListeners returned nil", port)
	}
	for _, w := range []string{"k.yaml: ", "readOnlyPort " + port, held.Addr().String(), "another process listens there", "set readOnlyPort to a free port"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	// The held listener still serves: the check closed only its own.
	c, err := net.Dial("tcp", held.Addr().String())
	if err != nil {
		t.Fatalf("the held port no longer answers: %v", err)
	}
	c.Close()
}

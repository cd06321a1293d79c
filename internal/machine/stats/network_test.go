package stats

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// networkStats lists every interface and gives eth0, the default one, inline
// too, as the kubelet's Summary does; no interfaces is no NetworkStats.
func TestNetworkStats(t *testing.T) {
	t.Parallel()
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	eth0 := statsapi.InterfaceStats{Name: "eth0", RxBytes: u(100), RxErrors: u(1), TxBytes: u(200), TxErrors: u(2)}
	net1 := statsapi.InterfaceStats{Name: "net1", RxBytes: u(7), RxErrors: u(0), TxBytes: u(0), TxErrors: u(0)}
	for _, tc := range []struct {
		name string
		in   []InterfaceSample
		want *statsapi.NetworkStats
	}{
		{"none", nil, nil},
		{"eth0 and another", []InterfaceSample{
			{Name: "eth0", RxBytes: 100, RxPackets: 5, RxErrors: 1, RxDropped: 9, TxBytes: 200, TxPackets: 6, TxErrors: 2, TxDropped: 9},
			{Name: "net1", RxBytes: 7, RxPackets: 1},
		}, &statsapi.NetworkStats{Time: now, InterfaceStats: eth0, Interfaces: []statsapi.InterfaceStats{eth0, net1}}},
		{"no eth0: none inline", []InterfaceSample{{Name: "net1", RxBytes: 7, RxPackets: 1}},
			&statsapi.NetworkStats{Time: now, Interfaces: []statsapi.InterfaceStats{net1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, networkStats(tc.in, now)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A pod's network is its sandbox's namespace's, read through the first
// process of the sandbox's cgroup (the fixture's /proc/100/net/dev: eth0
// and net1, lo and a veth left out); a sandbox in the node's namespace has
// none.
func TestSandboxNetwork(t *testing.T) {
	t.Parallel()
	dir := containerFixture(t, "v1", map[string]string{
		"proc/100/ns/net": "net:[4026532200]", "proc/300/ns/net": "net:[4026531840]",
	})
	var log bytes.Buffer
	p := containerProvider(t, dir, []*apitest.FakePodSandbox{
		sandbox("sb1", "default", "web", "1111", runtimeapi.PodSandboxState_SANDBOX_READY, 1),
	}, nil, nil, &log)
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := &summary{now: now, env: p.sampleEnv()}
	got, err := p.sandboxNetwork(s.env, "/kubepods/burstable/pod1111/sb1", s)
	if err != nil {
		t.Fatal(err)
	}
	eth0 := statsapi.InterfaceStats{Name: "eth0", RxBytes: u(9876), RxErrors: u(1), TxBytes: u(5432), TxErrors: u(3)}
	want := &statsapi.NetworkStats{Time: now, InterfaceStats: eth0, Interfaces: []statsapi.InterfaceStats{eth0,
		{Name: "net1", RxBytes: u(7), RxErrors: u(0), TxBytes: u(0), TxErrors: u(0)}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("web's network (-want +got):\n%s", diff)
	}
	if got, err := p.sandboxNetwork(s.env, "/kubepods/besteffort/pod2222/sb2", s); err != nil || got != nil {
		t.Errorf("hostnet's network = %+v, %v; want none", got, err)
	}
}

package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// /metrics/resource gives the Summary's CPU (core-seconds), working set,
// swap and container start times in the kubelet's names and labels, each
// sample stamped with its stats' time (ms), and resource_scrape_error 0;
// without stats, only resource_scrape_error 1.
func TestResourceMetrics(t *testing.T) {
	t.Parallel()
	at := metav1.NewTime(time.UnixMilli(1_700_000_000_123))
	started := metav1.NewTime(time.Unix(1_699_999_000, 500_000_000))
	sum := &statsapi.Summary{
		Node: statsapi.NodeStats{NodeName: "n1",
			CPU:    &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: u64(2_500_000_000)},
			Memory: &statsapi.MemoryStats{Time: at, WorkingSetBytes: u64(1 << 30)},
		},
		Pods: []statsapi.PodStats{{
			PodRef: statsapi.PodReference{Name: "web", Namespace: "default", UID: "u1"},
			CPU:    &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: u64(1_000_000_000)},
			Memory: &statsapi.MemoryStats{Time: at, WorkingSetBytes: u64(2048)},
			Swap:   &statsapi.SwapStats{Time: at, SwapUsageBytes: u64(0)},
			Containers: []statsapi.ContainerStats{
				{Name: "app", StartTime: started,
					CPU:    &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: u64(750_000_000)},
					Memory: &statsapi.MemoryStats{Time: at, WorkingSetBytes: u64(1024)}},
				{Name: "starting"}, // no stats yet: no samples
			},
		}},
	}
	healthy := start(t, Config{}, Deps{Summary: func(context.Context) (*statsapi.Summary, error) { return sum, nil }})
	broken := start(t, Config{}, Deps{Summary: func(context.Context) (*statsapi.Summary, error) { return nil, errors.New("no stats yet") }})
	const ms = " 1700000000123\n"
	want := []string{
		`container_cpu_usage_seconds_total{container="app",namespace="default",pod="web"} 0.75` + ms,
		`container_memory_working_set_bytes{container="app",namespace="default",pod="web"} 1024` + ms,
		`container_start_time_seconds{container="app",namespace="default",pod="web"} 1.6999990005e+09 1699999000500` + "\n",
		`node_cpu_usage_seconds_total 2.5` + ms,
		`node_memory_working_set_bytes 1.073741824e+09` + ms,
		`pod_cpu_usage_seconds_total{namespace="default",pod="web"} 1` + ms,
		`pod_memory_working_set_bytes{namespace="default",pod="web"} 2048` + ms,
		`pod_swap_usage_bytes{namespace="default",pod="web"} 0` + ms,
		"resource_scrape_error 0\n",
	}
	if diff := cmp.Diff(want, samples(t, healthy+"/metrics/resource")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"resource_scrape_error 1\n"}, samples(t, broken+"/metrics/resource")); diff != "" {
		t.Errorf("without stats (-want +got):\n%s", diff)
	}
}

// samples GETs url and returns its exposition's sample lines.
func samples(t *testing.T, url string) []string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	var out []string
	for l := range strings.Lines(string(b)) {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

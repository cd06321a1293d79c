package node

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPercentile(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, v := range n {
			out = append(out, time.Duration(v)*time.Millisecond)
		}
		return out
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"none", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"median of unsorted", ms(5, 1, 3, 2, 4), 50, 3 * time.Millisecond},
		{"p99 of ten is the largest", ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 99, 10 * time.Millisecond},
		{"p50 of ten is the fifth", ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 50, 5 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.samples, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.samples, tt.p, got, tt.want)
			}
		})
	}
}

func TestStatCPU(t *testing.T) {
	tests := []struct {
		name, stat string
		want       time.Duration
		wantErr    string
	}{
		{
			name: "utime plus stime; a name with spaces and parentheses",
			stat: "4242 (kube let) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 12 0 99 1000 500",
			want: 3800 * time.Millisecond,
		},
		{name: "no name end", stat: "4242 (kubelet S 1", wantErr: "no ')'"},
		{name: "short", stat: "1 (a) S 1 2 3", wantErr: "fields after the command name"},
		{name: "not a number", stat: "1 (a) S 1 1 1 0 -1 0 0 0 0 0 x 1 0", wantErr: `utime/stime "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := StatCPU(tt.stat)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("StatCPU: error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("StatCPU = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestStatusRSS(t *testing.T) {
	tests := []struct {
		name, status string
		want         int64
		wantErr      string
	}{
		{name: "kB", status: "Name:\tkubelet\nVmPeak:\t  9000 kB\nVmRSS:\t   51200 kB\nRssAnon:\t 1 kB\n", want: 50 << 20},
		{name: "missing", status: "Name:\tx\n", wantErr: "no VmRSS"},
		{name: "bad unit", status: "VmRSS:\t12 MB\n", wantErr: `VmRSS "12 MB"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := StatusRSS(tt.status)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("StatusRSS: error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("StatusRSS = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestFigure(t *testing.T) {
	f := Figure{Name: "idle0-cpu-pct", Kubelet: 3, Nodekeeper: 0.5}
	want := map[string]float64{"kubelet-idle0-cpu-pct": 3, "nodekeeper-idle0-cpu-pct": 0.5, "ratio-idle0-cpu-pct": 6}
	if diff := cmp.Diff(want, f.Metrics()); diff != "" {
		t.Errorf("Metrics (-want +got):\n%s", diff)
	}
	if got := (Figure{Kubelet: 3}).Ratio(); got != 0 {
		t.Errorf("Ratio with nodekeeper 0 = %v, want 0", got)
	}
	table := Table([]Figure{f})
	wantTable := "| figure | kubelet | nodekeeper | kubelet ÷ nodekeeper |\n|---|---|---|---|\n| idle0-cpu-pct | 3 | 0.5 | 6 |\n"
	if diff := cmp.Diff(wantTable, table); diff != "" {
		t.Errorf("Table (-want +got):\n%s", diff)
	}
}

func TestDecisions(t *testing.T) {
	kubelet := `I1124 09:26:51.663981   28401 kubelet.go:3499] "Creating a mirror pod for static pod" pod="default/x"
I1124 09:26:52.000100   28401 eviction_manager.go:377] "Eviction manager: attempting to reclaim" resourceName="memory"
W1124 09:26:53.5   28401 other.go:1] "Eviction manager: attempting to reclaim" malformed time
I1124 09:27:02.250000   28401 eviction_manager.go:377] "Eviction manager: attempting to reclaim" resourceName="memory"
`
	nk := `time=2026-11-24T09:26:51.100Z level=INFO msg="pod started"
time=2026-11-24T09:26:51.120Z level=WARN msg="Eviction manager: attempting to reclaim" resourceName=memory signal=allocatableMemory.available
`
	utc := time.UTC
	tests := []struct {
		name, log string
		want      []time.Time
	}{
		{"kubelet klog", kubelet, []time.Time{
			time.Date(2026, 11, 24, 9, 26, 52, 100000, utc), time.Date(2026, 11, 24, 9, 27, 2, 250000000, utc)}},
		{"nodekeeper slog", nk, []time.Time{time.Date(2026, 11, 24, 9, 26, 51, 120000000, utc)}},
		{"none", "I1124 09:26:51.663981   1 x.go:1] \"Eviction manager: pods ranked\"\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Decisions(tt.log, 2026, utc)); diff != "" {
				t.Errorf("Decisions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFirstAtOrAfter(t *testing.T) {
	base := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	times := []time.Time{base, base.Add(time.Second), base.Add(2 * time.Second)}
	tests := []struct {
		name   string
		t      time.Time
		want   time.Time
		wantOK bool
	}{
		{"exact", base.Add(time.Second), base.Add(time.Second), true},
		{"within the log's millisecond", base.Add(time.Second + 400*time.Microsecond), base.Add(time.Second), true},
		{"next", base.Add(1500 * time.Millisecond), base.Add(2 * time.Second), true},
		{"none after", base.Add(3 * time.Second), time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := FirstAtOrAfter(times, tt.t)
			if !got.Equal(tt.want) || ok != tt.wantOK {
				t.Errorf("FirstAtOrAfter(%v) = %v, %v; want %v, %v", tt.t, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestByKind(t *testing.T) {
	got := byKind([]string{"update leases/", "patch pods/status", "update leases/", "get nodes/", "patch pods/status", "update leases/"})
	want := "     3 update leases/\n     2 patch pods/status\n     1 get nodes/\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("byKind (-want +got):\n%s", diff)
	}
}

func TestMetricValue(t *testing.T) {
	text := `# HELP kubelet_pleg_relist_duration_seconds Duration.
kubelet_pleg_relist_duration_seconds_bucket{le="0.005"} 3
kubelet_pleg_relist_duration_seconds_sum_other 9
kubelet_pleg_relist_duration_seconds_sum 0.25
kubelet_pleg_relist_duration_seconds_count 40
`
	if v, ok := metricValue(text, "kubelet_pleg_relist_duration_seconds_sum"); !ok || v != 0.25 {
		t.Errorf("sum = %v, %v; want 0.25, true", v, ok)
	}
	if v, ok := metricValue(text, "kubelet_pleg_relist_duration_seconds_count"); !ok || v != 40 {
		t.Errorf("count = %v, %v; want 40, true", v, ok)
	}
	if _, ok := metricValue(text, "kubelet_pleg_relist_duration_seconds"); ok {
		t.Error("a histogram's bare name matched a sample")
	}
}

func TestParseCounts(t *testing.T) {
	if got, err := parseCounts("100, 250,500"); err != nil || !slices.Equal(got, []int{100, 250, 500}) {
		t.Errorf("parseCounts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "100,100", "250,100", "0", "x"} {
		if _, err := parseCounts(bad); err == nil {
			t.Errorf("parseCounts(%q) = nil error", bad)
		}
	}
}

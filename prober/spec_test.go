package prober

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestCompileProbe(t *testing.T) {
	t.Parallel()
	ctr := &v1.Container{
		Name:  "app",
		Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		Env:   []v1.EnvVar{{Name: "DIR", Value: "/srv"}},
	}
	httpGet := func(port intstr.IntOrString) v1.ProbeHandler {
		return v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: port}}
	}
	tests := []struct {
		name    string
		pt      ProbeType
		probe   v1.Probe
		want    *spec
		wantErr []string // substrings of the error
	}{
		{
			name:  "defaults",
			pt:    Liveness,
			probe: v1.Probe{ProbeHandler: httpGet(intstr.FromString("http"))},
			want: &spec{period: 10 * time.Second, timeout: time.Second, th: thresholds{1, 3}, kind: handlerHTTP,
				http: httpSpec{scheme: "http", port: 8080, path: "/healthz", header: http.Header{}}},
		},
		{
			name: "explicit values and exec expansion",
			pt:   Readiness,
			probe: v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"test", "-f", "$(DIR)/ok", "$$(DIR)", "$(NOPE)"}}},
				InitialDelaySeconds: 5, PeriodSeconds: 2, TimeoutSeconds: 3, SuccessThreshold: 2, FailureThreshold: 7},
			want: &spec{initialDelay: 5, period: 2 * time.Second, timeout: 3 * time.Second, th: thresholds{2, 7}, kind: handlerExec,
				command: []string{"test", "-f", "/srv/ok", "$(DIR)", "$(NOPE)"}},
		},
		{
			name:  "tcp by number, grace period carried",
			pt:    Startup,
			probe: v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(5432)}}, TerminationGracePeriodSeconds: ptr.To[int64](60)},
			want:  &spec{period: 10 * time.Second, timeout: time.Second, th: thresholds{1, 3}, kind: handlerTCP, port: 5432, tgps: ptr.To[int64](60)},
		},
		{
			name:  "grpc with service",
			pt:    Liveness,
			probe: v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9090, Service: ptr.To("db")}}},
			want:  &spec{period: 10 * time.Second, timeout: time.Second, th: thresholds{1, 3}, kind: handlerGRPC, port: 9090, service: "db"},
		},
		{name: "no handler", pt: Liveness, probe: v1.Probe{}, wantErr: []string{"no handler"}},
		{
			name: "two handlers", pt: Liveness,
			probe:   v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}, TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(1)}}},
			wantErr: []string{"2 handlers (exec, tcpSocket)"},
		},
		{
			name:  "undeclared port name that is a number",
			pt:    Liveness,
			probe: v1.Probe{ProbeHandler: httpGet(intstr.FromString("9100"))},
			want: &spec{period: 10 * time.Second, timeout: time.Second, th: thresholds{1, 3}, kind: handlerHTTP,
				http: httpSpec{scheme: "http", port: 9100, path: "/healthz", header: http.Header{}}},
		},
		{name: "unknown port name", pt: Readiness, probe: v1.Probe{ProbeHandler: httpGet(intstr.FromString("metrics"))},
			wantErr: []string{`container "app" declares no port named "metrics"`}},
		{name: "port out of range", pt: Readiness, probe: v1.Probe{ProbeHandler: httpGet(intstr.FromInt32(70000))},
			wantErr: []string{"between 1 and 65535, got 70000"}},
		{name: "negative period and threshold", pt: Readiness,
			probe:   v1.Probe{ProbeHandler: httpGet(intstr.FromInt32(80)), PeriodSeconds: -1, FailureThreshold: -2},
			wantErr: []string{"periodSeconds must not be negative, got -1", "failureThreshold must not be negative, got -2"}},
		{name: "liveness success threshold", pt: Liveness,
			probe:   v1.Probe{ProbeHandler: httpGet(intstr.FromInt32(80)), SuccessThreshold: 2},
			wantErr: []string{"successThreshold must be 1 for liveness probes"}},
		{name: "bad scheme", pt: Liveness,
			probe:   v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(80), Scheme: "FTP"}}},
			wantErr: []string{`scheme must be HTTP or HTTPS, got "FTP"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := compileProbe(tc.pt, &tc.probe, ctr)
			if len(tc.wantErr) > 0 {
				if !errors.Is(err, ErrInvalidProbe) {
					t.Fatalf("err = %v, want ErrInvalidProbe", err)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %q, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(spec{}, httpSpec{}, thresholds{})); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewHTTPRequest(t *testing.T) {
	t.Parallel()
	h := &httpSpec{scheme: "https", port: 8443, path: "/ready?full=1",
		header: http.Header{"Host": {"example.test"}, "X-Probe": {"1"}}}
	req, err := newHTTPRequest(h, "10.0.0.7", UserAgent)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{
		"url": req.URL.String(), "host": req.Host, "ua": req.Header.Get("User-Agent"),
		"accept": req.Header.Get("Accept"), "x": req.Header.Get("X-Probe"),
	}
	want := map[string]string{
		"url": "https://10.0.0.7:8443/ready?full=1", "host": "example.test", "ua": "kube-probe/1.37",
		"accept": "*/*", "x": "1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	h2 := &httpSpec{scheme: "http", port: 80, header: http.Header{"User-Agent": {"mine"}}}
	req, err = newHTTPRequest(h2, "", UserAgent)
	if err == nil {
		t.Fatalf("no pod IP: want error, got %v", req.URL)
	}
	h2.host = "127.0.0.1"
	req, err = newHTTPRequest(h2, "", UserAgent)
	if err != nil || req.Header.Get("User-Agent") != "mine" {
		t.Fatalf("explicit host and User-Agent: %v, %v", req, err)
	}
}

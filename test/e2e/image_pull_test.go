package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/ociregistry"
)

// heldRegistry serves the agent's own stand-in tarballs (pause.tar and
// testbox.tar, by their repository paths nodekeeper/pause and
// nodekeeper/testbox) on loopback, and holds every request for the
// repository asked first until release: a pull that takes as long as the
// test wants, as the upstream specs' CRI proxy makes the first PullImage
// wait.
type heldRegistry struct {
	reg      http.Handler
	held     chan struct{} // closed by release
	arrivals chan string   // the repository of each first request for it, as it arrives

	mu    sync.Mutex // guards the fields below
	first string     // the repository asked first, "" until then
	seen  map[string]bool
	log   []string // "arrive REPO" and "release", in order
}

var repoPath = regexp.MustCompile(`^/v2/(.+)/(manifests|blobs)/`)

func (h *heldRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m := repoPath.FindStringSubmatch(r.URL.Path); m != nil {
		repo := m[1]
		h.mu.Lock()
		if h.first == "" {
			h.first = repo
		}
		hold := repo == h.first
		if !h.seen[repo] {
			h.seen[repo] = true
			h.log = append(h.log, "arrive "+repo)
			h.arrivals <- repo // buffered for every repository served
		}
		h.mu.Unlock()
		if hold {
			select {
			case <-h.held:
			case <-r.Context().Done():
				return
			}
		}
	}
	h.reg.ServeHTTP(w, r)
}

func (h *heldRegistry) release() {
	h.mu.Lock()
	h.log = append(h.log, "release")
	h.mu.Unlock()
	close(h.held)
}

// startHeldRegistry serves the agent's stand-ins on a loopback port of its
// own until the test ends, and returns it with its host:port.
func startHeldRegistry(t *testing.T) (*heldRegistry, string) {
	t.Helper()
	art, err := build()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := ociregistry.Load(nil, filepath.Join(art.images, "pause.tar"), filepath.Join(art.images, "testbox.tar"))
	if err != nil {
		t.Fatal(err)
	}
	h := &heldRegistry{reg: reg, held: make(chan struct{}), arrivals: make(chan string, 8), seen: map[string]bool{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l) // ends with Close
	}()
	t.Cleanup(func() {
		h.mu.Lock()
		if h.held != nil {
			select {
			case <-h.held:
			default:
				close(h.held)
			}
		}
		h.mu.Unlock()
		srv.Close()
		<-done
		reg.Close()
	})
	return h, l.Addr().String()
}

// events returns the agent's events from GET /events on its socket.
func (a *Agent) events() ([]v1.Event, error) {
	resp, err := a.Client().Get("http://localhost/events")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /events: %s", resp.Status)
	}
	var list v1.EventList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// pullEvents returns the message of each pod's event of reason, by pod.
func pullEvents(evs []v1.Event, reason string) map[string]string {
	out := map[string]string{}
	for _, e := range evs {
		if e.Reason == reason {
			out[e.InvolvedObject.Name] = e.Message
		}
	}
	return out
}

// pulledDurations parses a Pulled event's message as the upstream node e2e
// specs do (image_pull_test.go, getDurationsFromPulledEventMsg): 13 words,
// the 6th the pull's time, the 7th without its "(" the time with the wait.
func pulledDurations(msg string) (pull, total time.Duration, err error) {
	w := strings.Split(msg, " ")
	if len(w) != 13 {
		return 0, 0, fmt.Errorf("pull event message should be split into 13 words, not %d: %q", len(w), msg)
	}
	if pull, err = time.ParseDuration(w[5]); err != nil {
		return 0, 0, err
	}
	total, err = time.ParseDuration(w[6][1:])
	return pull, total, err
}

// TestImagePullsSerialized: two pods pulling an image each
// (imagePullPolicy Always) from a loopback registry whose first pull is held
// for a while. With the kubelet's default (serializeImagePulls) the second
// pull waits for the first: it reaches the registry only after the first
// is let through, and its Pulled event, in the kubelet's words, says that
// it waited ("in D (D2 including waiting)", D2/D above 1.5, as the upstream
// spec "serialize image pull should be waiting more" checks). With
// serializeImagePulls: false and maxParallelImagePulls 5 the second pull
// reaches the registry while the first is held ("parallel image pull ...
// should pull immediately").
func TestImagePullsSerialized(t *testing.T) {
	for _, tc := range []struct {
		name     string
		config   string
		parallel bool
	}{
		{name: "default, serialized"},
		{name: "maxParallelImagePulls 5", config: "serializeImagePulls: false\nmaxParallelImagePulls: 5\n", parallel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, addr := startHeldRegistry(t)
			a := StartAgent(t, Options{Config: tc.config})
			pods := map[string]string{"nodekeeper/testbox": "pull-testbox-e2e", "nodekeeper/pause": "pull-pause-e2e"}
			for _, name := range []string{"testbox", "pause"} {
				a.WriteManifest("pull-"+name+".yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: pull-%[1]s}
spec:
  containers:
  - {name: main, image: %[2]s/nodekeeper/%[1]s:1, imagePullPolicy: Always}
`, name, addr))
			}

			ctx, cancel := context.WithTimeout(t.Context(), slow(t, 90*time.Second))
			defer cancel()
			var first string
			select {
			case first = <-reg.arrivals:
			case <-ctx.Done():
				t.Fatalf("no pull reached the registry\nagent log (tail):\n%s", tail(a.Log(), 40))
			}
			a.Eventually("both pods' Pulling events", 30*time.Second, func() (bool, string) {
				evs, err := a.events()
				if err != nil {
					return false, err.Error()
				}
				pulling := pullEvents(evs, "Pulling")
				return len(pulling) == 2, fmt.Sprint(pulling)
			})
			// The first pull is held; the second has had its Pulling
			// event. Held on, the first pull is slow: in parallel the
			// second reaches the registry meanwhile, serialized it
			// cannot (the hold is the slow pull the test is about).
			hold := time.NewTimer(slow(t, 3*time.Second))
			var second string
			select {
			case second = <-reg.arrivals:
			case <-hold.C:
			}
			hold.Stop()
			reg.release()
			for _, p := range pods {
				a.WaitPod(p, "running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
			}
			reg.mu.Lock()
			log := strings.Join(reg.log, ", ")
			reg.mu.Unlock()
			other := "nodekeeper/pause"
			if first == other {
				other = "nodekeeper/testbox"
			}
			wantLog := fmt.Sprintf("arrive %s, release, arrive %s", first, other)
			if tc.parallel {
				wantLog = fmt.Sprintf("arrive %s, arrive %s, release", first, other)
			}
			if log != wantLog {
				t.Errorf("registry: %s; want %s (second pull seen while held: %q)", log, wantLog, second)
			}

			evs, err := a.events()
			if err != nil {
				t.Fatal(err)
			}
			pulled := pullEvents(evs, "Pulled")
			for repo, pod := range pods {
				msg := pulled[pod]
				pull, total, err := pulledDurations(msg)
				if err != nil {
					t.Errorf("%s: Pulled event %q: %v", pod, msg, err)
					continue
				}
				t.Logf("%s: %s", pod, msg)
				wantPrefix := fmt.Sprintf("Successfully pulled image %q in ", addr+"/"+repo+":1")
				if !strings.HasPrefix(msg, wantPrefix) || !regexp.MustCompile(`\. Image size: [1-9][0-9]* bytes\.$`).MatchString(msg) {
					t.Errorf("%s: Pulled event %q; want %q..., with the image's size", pod, msg, wantPrefix)
				}
				if total < pull {
					t.Errorf("%s: %v including waiting is less than the pull's %v", pod, total, pull)
				}
				switch {
				case repo != other:
				case !tc.parallel && float64(total.Milliseconds()) <= 1.5*float64(pull.Milliseconds()):
					t.Errorf("%s, pulled second: pull %v, %v including waiting; want a delayed pull (the upstream spec's ratio above 1.5)", pod, pull, total)
				case tc.parallel && total-pull > time.Second:
					t.Errorf("%s, pulled second: pull %v, %v including waiting; want no wait", pod, pull, total)
				}
			}
		})
	}
}

// TestImageImportedAgain: an image the agent imported from its image
// directory and that is removed since (as its image GC removes unused
// images on a full disk) is imported again from its file when a pod needs
// it, as the kubelet pulls a collected image again: no registry serves
// localhost/nodekeeper/testbox:1, and without this the pod stayed in
// ImagePullBackOff (the quick start's pods did, on a disk past 85 %).
func TestImageImportedAgain(t *testing.T) {
	a := StartAgent(t, Options{})
	a.Eventually("testbox imported at start", 60*time.Second, func() (bool, string) {
		return strings.Contains(a.Log(), `msg="image imported" image=`+testbox), "not in the log yet"
	})
	if err := a.CRI().RemoveImage(t.Context(), &runtimeapi.ImageSpec{Image: testbox}); err != nil {
		t.Fatal(err)
	}
	if st, err := a.CRI().ImageStatus(t.Context(), &runtimeapi.ImageSpec{Image: testbox}, false); err != nil || st.GetImage() != nil {
		t.Fatalf("%s after RemoveImage: %v, %v; want gone", testbox, st.GetImage(), err)
	}
	a.WriteManifest("web.yaml", webManifest("web", "again"))
	a.WaitPod("web-e2e", "running on the image imported again", running)
	again := regexp.MustCompile(`msg="image imported again from its file" .*image=` + regexp.QuoteMeta(testbox) + " ")
	if !again.MatchString(a.Log()) {
		t.Errorf("the agent's log does not say it imported %s again; tail:\n%s", testbox, tail(a.Log(), 30))
	}
	evs, err := a.events()
	if err != nil {
		t.Fatal(err)
	}
	if msg, ok := pullEvents(evs, "Pulled")["web-e2e"]; !ok || !strings.Contains(msg, "Successfully pulled image") {
		t.Errorf("Pulled event of web-e2e = %q, want the pull's", msg)
	}
}

package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
)

// buildImages runs build into a temporary directory.
func buildImages(t *testing.T) map[string]image {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	imgs, err := build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	byRef := map[string]image{}
	for _, img := range imgs {
		byRef[img.Ref] = img
	}
	return byRef
}

func TestRunUsage(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	if code := run(t.Context(), []string{"x"}, io.Discard, &stderr); code != 2 || stderr.String() != "mkimage: unexpected arguments [\"x\"]\n" {
		t.Errorf("run x = %d, %q", code, stderr.String())
	}
}

// TestBuildReproducible: two builds give the same image IDs, named by the
// shared references.
func TestBuildReproducible(t *testing.T) {
	t.Parallel()
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("builds both programs twice")
	}
	a, b := buildImages(t), buildImages(t)
	ids := func(m map[string]image) map[string]string {
		out := map[string]string{}
		for ref, img := range m {
			out[ref] = img.ID
		}
		return out
	}
	if diff := cmp.Diff(ids(a), ids(b)); diff != "" {
		t.Errorf("IDs differ between builds (-first +second):\n%s", diff)
	}
	for _, ref := range []string{ocibuild.PauseRef, ocibuild.TestboxRef} {
		if _, ok := a[ref]; !ok {
			t.Errorf("no image %s in %v", ref, a)
		}
	}
}

// TestImagesRunInContainerd imports both images into a private containerd,
// makes our pause the sandbox image, and runs testbox in a host-network pod:
// its HTTP health answers on loopback.
func TestImagesRunInContainerd(t *testing.T) {
	t.Parallel()
	c := containerdtest.Start(t)
	imgs := buildImages(t)
	pause, testbox := imgs[ocibuild.PauseRef], imgs[ocibuild.TestboxRef]

	// Our pause under the sandbox reference containerdtest configured, so
	// the pod below runs it as its sandbox.
	sandbox := containerdtest.BuildPause(t, t.TempDir(), containerdtest.SandboxImageRef)
	c.Import(t,
		containerdtest.Built{Ref: pause.Ref, Path: pause.Path, ID: pause.ID},
		containerdtest.Built{Ref: testbox.Ref, Path: testbox.Path, ID: testbox.ID},
		sandbox,
	)

	port := freePort(t)
	pod := c.RunPod(t, "testbox", "uid-testbox")
	// The sandbox's process runs our pause binary.
	var sandboxPID string
	for _, line := range strings.Split(c.Ctr(t, "tasks", "ls"), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == pod.ID {
			sandboxPID = f[1]
		}
	}
	// Until runc's init process execs the entrypoint, it is runc.
	for deadline := time.Now().Add(20 * time.Second); ; {
		exe, err := os.ReadFile("/proc/" + sandboxPID + "/exe")
		if err != nil {
			t.Fatalf("sandbox %s (pid %q): %v", pod.ID, sandboxPID, err)
		}
		if bytes.Equal(exe, pause.bin) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox runs a %d-byte program, not our %d-byte pause", len(exe), len(pause.bin))
		}
		<-time.After(20 * time.Millisecond) // polling another process, not waiting for a goroutine
	}
	c.CreateContainer(t, pod, "web", 0, ocibuild.TestboxRef, []string{"serve", "--http", "127.0.0.1:" + port}, true)
	url := "http://127.0.0.1:" + port + "/healthz"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && string(body) == "ok\n" {
				return
			}
			t.Fatalf("GET %s = %d %q", url, resp.StatusCode, body)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testbox never answered %s: %v\n%s", url, err, c.Log())
		case <-time.After(50 * time.Millisecond): // the container is starting
		}
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := strings.Cut(ln.Addr().String(), ":")
	if _, err := strconv.Atoi(port); err != nil {
		t.Fatal(err)
	}
	return port
}

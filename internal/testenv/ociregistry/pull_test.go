package ociregistry

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/ocibuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
	"github.com/nodekeeper/nodekeeper/internal/testenv/e2eimages"
)

// TestPullThroughMirror starts a registry on loopback and a containerd of
// the test's own mirroring registry.k8s.io and docker.io to it, and pulls
// stand-ins by their upstream names through CRI with nothing imported
// first, as the conformance harness's containerds do: on the containerd of
// PATH (1.6 here) and on hack/containerd's 1.7. An image the registry lacks
// fails at once (the mirror replaces the registry: no reach for the
// internet), and the stand-in named by a digest, which no registry can
// serve, is found by that name once imported.
func TestPullThroughMirror(t *testing.T) {
	for _, tc := range []struct {
		name   string
		binDir func(t *testing.T) string
	}{
		{"containerd of PATH", func(*testing.T) string { return "" }},
		{"containerd 1.7", func(t *testing.T) string { return containerdtest.BuildContainerd(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Not parallel: the 1.7 build may run first, and two
			// containerds at once only slow each other.
			dir := t.TempDir()
			agn, agnBuilt := write(t, dir, e2eimages.AgnhostRef, "agnhost")
			sriov, sriovBuilt := write(t, dir, e2eimages.SRIOVDevicePluginRef, "sriov")
			byDigest, digestBuilt := write(t, dir, e2eimages.BusyboxDigestRef, "busybox")
			reg, err := Load(nil, agn, sriov, byDigest)
			if err != nil {
				t.Fatal(err)
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- reg.Serve(ctx, l) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("registry: %v", err)
				}
			})
			url := "http://" + l.Addr().String()
			mirrors := map[string]string{}
			for _, host := range reg.Registries() {
				mirrors[host] = url
			}
			c := containerdtest.StartWith(t, containerdtest.Options{BinDir: tc.binDir(t), RegistryMirrors: mirrors})
			t.Logf("containerd %s, mirrors %v", c.RuntimeVersion, mirrors)

			for _, b := range []ocibuild.Built{agnBuilt, sriovBuilt} {
				if st, err := c.CRI.ImageStatus(t.Context(), &runtimeapi.ImageSpec{Image: b.Ref}, false); err != nil || st.GetImage() != nil {
					t.Fatalf("%s before the pull: %v, %v; want no image", b.Ref, st.GetImage(), err)
				}
				began := time.Now()
				id, err := c.CRI.PullImage(t.Context(), &runtimeapi.ImageSpec{Image: b.Ref}, nil, nil)
				if err != nil {
					t.Fatalf("pull %s: %v\n%s", b.Ref, err, c.Log())
				}
				st, err := c.CRI.ImageStatus(t.Context(), &runtimeapi.ImageSpec{Image: b.Ref}, false)
				if err != nil {
					t.Fatal(err)
				}
				img := st.GetImage()
				t.Logf("pulled %s in %v: id %s, tags %v, digests %v", b.Ref, time.Since(began).Round(time.Millisecond), id, img.GetRepoTags(), img.GetRepoDigests())
				if img.GetId() != b.ID || !slices.Contains(img.GetRepoTags(), b.Ref) {
					t.Errorf("%s: id %s, tags %v; want id %s", b.Ref, img.GetId(), img.GetRepoTags(), b.ID)
				}
				ref, _ := ParseRef(b.Ref)
				if want := ref.Registry + "/" + ref.Repository + "@" + b.Manifest; !slices.Contains(img.GetRepoDigests(), want) {
					t.Errorf("%s: repo digests %v, want %s", b.Ref, img.GetRepoDigests(), want)
				}
			}

			// Not served: fails at once, without reaching registry.k8s.io.
			pctx, pcancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer pcancel()
			if _, err := c.CRI.PullImage(pctx, &runtimeapi.ImageSpec{Image: e2eimages.EtcdRef}, nil, nil); err == nil || pctx.Err() != nil {
				t.Errorf("pull of %s, which the registry lacks: %v (deadline: %v); want a not-found error at once", e2eimages.EtcdRef, err, pctx.Err())
			}

			// The digest-named stand-in: not pullable, found once imported.
			if _, err := c.CRI.PullImage(pctx, &runtimeapi.ImageSpec{Image: e2eimages.BusyboxDigestRef}, nil, nil); err == nil {
				t.Errorf("pull of %s succeeded; no registry can serve a digest its content does not have", e2eimages.BusyboxDigestRef)
			}
			c.Import(t, containerdtest.Built{Ref: digestBuilt.Ref, Path: byDigest, ID: digestBuilt.ID})
		})
	}
}

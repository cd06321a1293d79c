package containerd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWriteCNIConfig(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "net.d") // made by WriteCNIConfig
	written, err := WriteCNIConfig(dir, "10.58.0.0/16", CNIOptions{Bridge: "nk0", DataDir: "/var/lib/nodekeeper/cni/networks"})
	if err != nil || !written {
		t.Fatalf("WriteCNIConfig = %v, %v; want written", written, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, CNIConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "10-nodekeeper.conflist", string(b))

	// The same again: nothing to write.
	if written, err := WriteCNIConfig(dir, "10.58.0.0/16", CNIOptions{Bridge: "nk0", DataDir: "/var/lib/nodekeeper/cni/networks"}); err != nil || written {
		t.Fatalf("second WriteCNIConfig = %v, %v; want not written", written, err)
	}
	// A new pod CIDR: our own file follows it.
	if written, err := WriteCNIConfig(dir, "10.99.0.0/16", CNIOptions{Bridge: "nk0", DataDir: "/var/lib/nodekeeper/cni/networks"}); err != nil || !written {
		t.Fatalf("WriteCNIConfig with a new CIDR = %v, %v; want written", written, err)
	}
	b2, _ := os.ReadFile(filepath.Join(dir, CNIConfigFile))
	if want := strings.ReplaceAll(string(b), "10.58.0.0/16", "10.99.0.0/16"); string(b2) != want {
		t.Errorf("after the CIDR change (-want +got):\n%s", cmp.Diff(want, string(b2)))
	}
}

func TestWriteCNIConfigLeavesOthersAlone(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files []string
		want  bool
	}{
		{name: "empty", want: true},
		{name: "a .conf", files: []string{"87-podman.conf"}},
		{name: "a .conflist", files: []string{"10-flannel.conflist"}},
		{name: "a .json", files: []string{"net.json"}},
		{name: "unrelated files only", files: []string{"README", ".10-x.conflist.tmp-1", "x.conf.bak"}, want: true},
		{name: "ours next to another", files: []string{CNIConfigFile, "05-mine.conflist"}},
		{name: "ours alone, outdated", files: []string{CNIConfigFile}, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, f := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("{}"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			written, err := WriteCNIConfig(dir, DefaultPodCIDR, CNIOptions{})
			if err != nil || written != tc.want {
				t.Fatalf("WriteCNIConfig = %v, %v; want %v", written, err, tc.want)
			}
			entries, _ := os.ReadDir(dir)
			got := map[string]bool{} // file: changed
			for _, e := range entries {
				b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				got[e.Name()] = string(b) != "{}"
			}
			want := map[string]bool{}
			for _, f := range tc.files {
				want[f] = false
			}
			if tc.want {
				want[CNIConfigFile] = true
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("files (name: written) (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteCNIConfigBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, cidr string
		opts       CNIOptions
		wantErr    string
	}{
		{name: "not a CIDR", cidr: "10.58.0.0/33", wantErr: `podCIDR "10.58.0.0/33": not a CIDR (want e.g. 10.58.0.0/16)`},
		{name: "empty", cidr: "", wantErr: `podCIDR "": not a CIDR (want e.g. 10.58.0.0/16)`},
		{name: "bad bridge", cidr: DefaultPodCIDR, opts: CNIOptions{Bridge: "a/b"},
			wantErr: `containerd: cniBridge "a/b": not a valid interface name (at most 15 bytes, no '/', ':' or spaces)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			written, err := WriteCNIConfig(dir, tc.cidr, tc.opts)
			if err == nil || err.Error() != tc.wantErr || written {
				t.Fatalf("WriteCNIConfig = %v, %v; want error %q", written, err, tc.wantErr)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("files written on bad input: %v", entries)
			}
		})
	}
}

func TestCNIBinDir(t *testing.T) {
	t.Parallel()
	a, b, state := t.TempDir(), t.TempDir(), t.TempDir()
	for dir, names := range map[string][]string{a: {"bridge", "loopback"}, b: {"bridge", "portmap"}} {
		for _, n := range names {
			executable(t, dir, n)
		}
	}
	if got, err := cniBinDir(state, []string{a}); err != nil || got != a {
		t.Errorf("one dir: cniBinDir = %q, %v; want %q", got, err, a)
	}
	farm, err := cniBinDir(state, []string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	entries, _ := os.ReadDir(farm)
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(farm, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got[e.Name()] = target
	}
	want := map[string]string{
		"bridge":   filepath.Join(a, "bridge"), // the first dir wins
		"loopback": filepath.Join(a, "loopback"),
		"portmap":  filepath.Join(b, "portmap"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
	none, err := cniBinDir(state, nil)
	if err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(none); err != nil || len(entries) != 0 {
		t.Errorf("no dirs: %s holds %v (%v), want an empty dir", none, entries, err)
	}
}

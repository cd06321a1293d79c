package checkpoint

import (
	"encoding/json"
	"errors"
	"hash/fnv"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sample() State {
	return State{
		Entries: []PodDevicesEntry{
			{PodUID: "pod-1", ContainerName: "app", ResourceName: "example.com/gpu",
				DeviceIDs: DevicesPerNUMA{0: {"dev-a"}, -1: {"dev-b"}}, AllocResp: []byte{0x0a, 0x03, 0x61, 0x62, 0x63}},
			{PodUID: "pod-2", ContainerName: "init", ResourceName: "example.com/nul",
				DeviceIDs: DevicesPerNUMA{-1: {"a\x00b", "tab\there", "bell\a", "ünï"}}, AllocResp: []byte{}},
		},
		Registered: map[string][]string{"example.com/gpu": {"dev-a", "dev-b"}, "example.com/nul": {"a\x00b"}, "example.com/empty": {}},
		BootID:     "9b2f0d2e-0000-4000-8000-000000000000",
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   State
	}{
		{"sample", sample()},
		{"empty", State{}},
		{"no boot id", State{Registered: map[string][]string{"x.io/y": nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := Encode(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			if diff := cmp.Diff(tc.in, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

// TestChecksumFollowsKubeletRules recomputes the checksum the way the
// kubelet documents it, from a hand-written rendering of Data, and compares
// it with ours: type names, field order and quoting are part of the format.
func TestChecksumFollowsKubeletRules(t *testing.T) {
	t.Parallel()
	d := checkpointData{
		PodDeviceEntries: []PodDevicesEntry{{PodUID: "u", ContainerName: "c", ResourceName: "r.io/x",
			DeviceIDs: DevicesPerNUMA{-1: {"d\x00"}}, AllocResp: []byte{1, 2}}},
		RegisteredDevices: map[string][]string{"r.io/x": {"d\x00"}},
	}
	// dump.ForHash is spew's %#v: types in parentheses, strings unquoted.
	rendered := "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)u " +
		"ContainerName:(string)c ResourceName:(string)r.io/x DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:[d\x00]] " +
		"AllocResp:([]uint8)[1 2]}] RegisteredDevices:(map[string][]string)map[r.io/x:[d\x00]]}"
	h := fnv.New32a()
	h.Write([]byte(rendered))
	if got, want := checksum(d), uint64(h.Sum32()); got != want {
		t.Errorf("checksum = %d, want %d (FNV-32a of %q)", got, want, rendered)
	}
}

// TestKubeletFixture reads a checkpoint written by the kubelet's own code
// (testdata/kubelet_internal_checkpoint, made by hack/tools/kubeletcheckpoint).
func TestKubeletFixture(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/kubelet_internal_checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := fixtureState()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kubelet fixture (-want +got):\n%s", diff)
	}
}

// fixtureState is what hack/tools/kubeletcheckpoint writes.
func fixtureState() State {
	return State{
		Entries: []PodDevicesEntry{
			{PodUID: "0a9e3d5c-7d1e-4f7b-9a52-5d0f8cf1c001", ContainerName: "trainer", ResourceName: "example.com/gpu",
				DeviceIDs: DevicesPerNUMA{0: {"gpu-0", "gpu-1"}, 1: {"gpu-1"}}, AllocResp: []byte("\n\x11\n\bGPU_LIST\x12\x05gpu-0")},
			{PodUID: "0a9e3d5c-7d1e-4f7b-9a52-5d0f8cf1c001", ContainerName: "init", ResourceName: "smarter-devices/null",
				DeviceIDs: DevicesPerNUMA{-1: {"null\x00\x01"}}, AllocResp: []byte{}},
		},
		Registered: map[string][]string{
			"example.com/gpu":      {"gpu-0", "gpu-1", "gpu-2"},
			"smarter-devices/null": {"null\x00\x01"},
		},
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	good, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"truncated", string(good[:len(good)/2])},
		{"tampered device", strings.Replace(string(good), "dev-a", "dev-z", 1)},
		{"tampered checksum", strings.Replace(string(good), `"Checksum":`, `"Checksum":1`, 1)},
		{"not json", "\x00\x01garbage"},
		{"old layout with device list", `{"Data":{"PodDeviceEntries":[{"PodUID":"p","ContainerName":"c","ResourceName":"r.io/x","DeviceIDs":["a"],"AllocResp":""}],"RegisteredDevices":{}},"Checksum":1}`},
		{"other document", `{"policyName":"none","defaultCpuSet":"","checksum":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Decode([]byte(tc.in)); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Decode error = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestJSONFieldNames(t *testing.T) {
	t.Parallel()
	b, err := Encode(State{Entries: []PodDevicesEntry{{PodUID: "p", ContainerName: "c", ResourceName: "r.io/x",
		DeviceIDs: DevicesPerNUMA{-1: {"a"}, 0: {"b"}}, AllocResp: []byte{1}}}, Registered: map[string][]string{"r.io/x": {"a"}}})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "Checksum")
	want := map[string]any{"Data": map[string]any{
		"PodDeviceEntries": []any{map[string]any{
			"PodUID": "p", "ContainerName": "c", "ResourceName": "r.io/x",
			"DeviceIDs": map[string]any{"-1": []any{"a"}, "0": []any{"b"}}, "AllocResp": "AQ==",
		}},
		"RegisteredDevices": map[string]any{"r.io/x": []any{"a"}},
	}}
	if diff := cmp.Diff(want, doc); diff != "" {
		t.Errorf("layout (-want +got):\n%s", diff)
	}
}

func FuzzDecode(f *testing.F) {
	good, err := Encode(sample())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"Data":{},"Checksum":0}`))
	f.Add([]byte(`{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":2166136261}`))
	f.Add([]byte("null"))
	if b, err := os.ReadFile("testdata/kubelet_internal_checkpoint"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		// Whatever decodes must encode and decode to the same state.
		again, err := Encode(st)
		if err != nil {
			t.Fatal(err)
		}
		st2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if diff := cmp.Diff(st, st2); diff != "" {
			t.Fatalf("unstable (-first +second):\n%s", diff)
		}
	})
}

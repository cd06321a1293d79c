// Command kubeletcheckpoint reads and writes the device manager checkpoint
// with the kubelet's own code, to prove that nodekeeper's checkpoint and the
// kubelet's are interchangeable.
//
//	kubeletcheckpoint write DIR   writes DIR/kubelet_internal_checkpoint (the test fixture)
//	kubeletcheckpoint read DIR    loads it, verifying the checksum, and prints its data as JSON
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
)

const name = "kubelet_internal_checkpoint"

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: kubeletcheckpoint write|read DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "kubeletcheckpoint:", err)
		os.Exit(1)
	}
}

func run(cmd, dir string) error {
	cm, err := checkpointmanager.NewCheckpointManager(dir)
	if err != nil {
		return err
	}
	switch cmd {
	case "write":
		resp, err := proto.MarshalOptions{Deterministic: true}.Marshal(&pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"GPU_LIST": "gpu-0"},
		})
		if err != nil {
			return err
		}
		entries := []checkpoint.PodDevicesEntry{
			{PodUID: "0a9e3d5c-7d1e-4f7b-9a52-5d0f8cf1c001", ContainerName: "trainer", ResourceName: "example.com/gpu",
				DeviceIDs: checkpoint.DevicesPerNUMA{0: {"gpu-0", "gpu-1"}, 1: {"gpu-1"}}, AllocResp: resp},
			{PodUID: "0a9e3d5c-7d1e-4f7b-9a52-5d0f8cf1c001", ContainerName: "init", ResourceName: "smarter-devices/null",
				DeviceIDs: checkpoint.DevicesPerNUMA{-1: {"null\x00\x01"}}, AllocResp: []byte{}},
		}
		registered := map[string][]string{
			"example.com/gpu":      {"gpu-0", "gpu-1", "gpu-2"},
			"smarter-devices/null": {"null\x00\x01"},
		}
		return cm.CreateCheckpoint(name, checkpoint.New(entries, registered))
	case "read":
		cp := checkpoint.New(nil, nil)
		if err := cm.GetCheckpoint(name, cp); err != nil {
			return err
		}
		entries, registered := cp.GetData()
		type entry struct {
			PodUID, ContainerName, ResourceName string
			Devices                             []string
			Envs                                map[string]string
		}
		out := struct {
			Entries    []entry
			Registered map[string][]string
		}{Registered: registered}
		for _, e := range entries {
			resp := &pluginapi.ContainerAllocateResponse{}
			if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
				return fmt.Errorf("entry %s/%s: %w", e.PodUID, e.ContainerName, err)
			}
			devs := sortedSet(e.DeviceIDs)
			out.Entries = append(out.Entries, entry{e.PodUID, e.ContainerName, e.ResourceName, devs, resp.Envs})
		}
		return json.NewEncoder(os.Stdout).Encode(out)
	}
	return fmt.Errorf("unknown command %q", cmd)
}

func sortedSet(d checkpoint.DevicesPerNUMA) []string {
	var out []string
	for _, id := range d.Devices().UnsortedList() {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

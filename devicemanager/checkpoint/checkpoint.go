// Package checkpoint reads and writes the device manager's state file in the
// kubelet's format, so that a node can move between the kubelet and nodekeeper
// without losing device assignments.
//
// The file is JSON:
//
//	{"Data": {"PodDeviceEntries": [...], "RegisteredDevices": {...}},
//	 "Checksum": <uint64>, "BootID": "..."}
//
// Checksum is FNV-32a over k8s.io/utils/dump.ForHash of the Data value. That
// rendering names the Go types (package name included), so the unexported type
// name checkpointData, the package name "checkpoint" and the field names and
// order below are part of the format and must not change.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"

	"k8s.io/utils/dump"
)

// FileName is the checkpoint's name inside the device-plugin directory.
const FileName = "kubelet_internal_checkpoint"

// NodeWithoutTopology is the NUMA key for devices that report no topology.
const NodeWithoutTopology int64 = -1

// ErrCorrupt is returned for a file that is not a valid checkpoint: bad JSON,
// a layout of another version, or a checksum mismatch.
var ErrCorrupt = errors.New("checkpoint is corrupt")

// DevicesPerNUMA maps a NUMA node ID to the device IDs on it. A device on
// several nodes appears under each of them.
type DevicesPerNUMA map[int64][]string

// Devices returns every device ID once, sorted.
func (d DevicesPerNUMA) Devices() []string {
	var out []string
	for _, ids := range d {
		out = append(out, ids...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// PodDevicesEntry is the allocation of one resource to one container.
// AllocResp is the protobuf encoding of the plugin's ContainerAllocateResponse.
type PodDevicesEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     DevicesPerNUMA
	AllocResp     []byte
}

// checkpointData is what the checksum covers. Its name is part of the format.
type checkpointData struct {
	PodDeviceEntries  []PodDevicesEntry
	RegisteredDevices map[string][]string
}

// file is the on-disk document.
type file struct {
	Data     checkpointData
	Checksum uint64
	BootID   string `json:",omitempty"`
}

// State is the content of a checkpoint. Encode and Decode neither keep nor
// modify the slices and maps they are given.
type State struct {
	// Entries are the pod device assignments.
	Entries []PodDevicesEntry
	// Registered maps a resource to its healthy device IDs at write time.
	Registered map[string][]string
	// BootID is the kernel boot ID when the file was written; empty when
	// unknown or written by a kubelet that predates the field.
	BootID string
}

// checksum computes the kubelet's checksum of d.
func checksum(d checkpointData) uint64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(dump.ForHash(d)))
	return uint64(h.Sum32())
}

// Encode renders s in the kubelet's format with its checksum.
func Encode(s State) ([]byte, error) {
	f := file{
		Data: checkpointData{
			PodDeviceEntries:  s.Entries,
			RegisteredDevices: s.Registered,
		},
		BootID: s.BootID,
	}
	f.Checksum = checksum(f.Data)
	b, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	return b, nil
}

// Decode parses a checkpoint and verifies its checksum. Any problem with the
// content wraps ErrCorrupt.
func Decode(b []byte) (State, error) {
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if sum := checksum(f.Data); sum != f.Checksum {
		return State{}, fmt.Errorf("%w: checksum %d, content hashes to %d", ErrCorrupt, f.Checksum, sum)
	}
	for i, e := range f.Data.PodDeviceEntries {
		if e.PodUID == "" || e.ContainerName == "" || e.ResourceName == "" {
			return State{}, fmt.Errorf("%w: entry %d lacks PodUID, ContainerName or ResourceName", ErrCorrupt, i)
		}
	}
	return State{
		Entries:    f.Data.PodDeviceEntries,
		Registered: maps.Clone(f.Data.RegisteredDevices),
		BootID:     f.BootID,
	}, nil
}

package simulate

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: no scenario file makes Parse panic, and every rejection is of class
// ErrBadScenario and one line.
func FuzzParse(f *testing.F) {
	// Small seeds: the example scenarios are large enough to slow the fuzzer's
	// mutation of them to a crawl, and TestExampleScenarios covers them.
	f.Add([]byte("until: 5m\nloops: true\nsteps: [{at: 0s, pods: [{metadata: {name: p, uid: u}, spec: {containers: [{name: c, resources: {requests: {memory: 1Gi}}}]}}], summary: {node: {memory: {availableBytes: 1, workingSetBytes: 2}}}}]"))
	f.Add([]byte("until: 1m\nconfig: {evictionHard: {memory.available: 1Gi}, containerGC: {minAge: 1m}}\nnode: {capacity: {cpu: '2'}}"))
	f.Add([]byte("until: 1m\nsteps: [{at: 0s, do: [{freeImageSpace: 10}]}]"))
	f.Add([]byte("until: 1m\nnode: {capacity: {memory: 16Ei}}\nsteps: [{at: 0s, summary: {node: {memory: {availableByts: 1}}, pods: [{podRef: {name: p}, volume: [{usedBytes: 18446744073709551615}]}]}}]"))
	f.Add([]byte(`{"until": "1m", "steps": [{"at": "0s", "imageFs": {"capacityBytes": 1}}]}`))
	f.Add([]byte("until: 2562047h47m16.854775807s\nsteps: [{at: 87600h}]"))
	f.Add([]byte("until: 1m\nsteps: [{at: 0s, images: [{id: a, size: 9223372036854775808}, {id: a}], containers: [{id: c}, {id: c}], imageFs: {capacityBytes: 18446744073709551615}}]"))
	f.Add([]byte("until: 1m\nsteps: [{at: 0s, pods: [{metadata: {name: y}}]}]"))
	f.Add([]byte("until: 1m\nsteps: [{at: 0s, summary: {node: {memory: {availableBytes: .inf, time: not-a-time}}}}]"))
	f.Add([]byte(`{"until": "1m", "steps": [{"at": "0s", "images": [{"id": "a", "size": 1e400}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Parse("fuzz.yaml", data)
		if err != nil && !errors.Is(err, ErrBadScenario) {
			t.Fatalf("error of the wrong class: %v", err)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\r\n") {
			t.Fatalf("error %q is not one line", err)
		}
	})
}

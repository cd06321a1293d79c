package snapshot

import (
	"context"

	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
)

// The tests read their inputs from files as the commands do (decode.ReadFile
// with the default limit, its errors bad input), then parse them.

func loadPods(path string) ([]*v1.Pod, error) {
	data, err := decode.ReadFile(context.Background(), path, decode.DefaultMaxInputSize)
	if err != nil {
		return nil, decode.Bad(err)
	}
	return ParsePods(path, data)
}

func loadPod(path string) (*v1.Pod, error) {
	pods, err := loadPods(path)
	if err != nil {
		return nil, err
	}
	return OnePod(path, pods)
}

func loadSummary(path string) (*statsapi.Summary, error) {
	data, err := decode.ReadFile(context.Background(), path, decode.DefaultMaxInputSize)
	if err != nil {
		return nil, decode.Bad(err)
	}
	return ParseSummary(path, data)
}

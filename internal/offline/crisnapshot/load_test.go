package crisnapshot

import (
	"context"
	"io"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/imagegc"
	"github.com/nodekeeper/nodekeeper/internal/base/decode"
)

// The tests read their inputs from files as `nodekeeper explain imagegc` does
// (decode.ReadFile with the default limit), then parse them.

func readFile(path string) ([]byte, error) {
	return decode.ReadFile(context.Background(), path, decode.DefaultMaxInputSize)
}

func loadImages(path string) ([]*runtimeapi.Image, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return ParseImages(path, b)
}

func loadContainers(path string) ([]*runtimeapi.Container, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return ParseContainers(path, b)
}

func loadRecords(path string, images []*runtimeapi.Image, warnings io.Writer) (map[string]imagegc.Record, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return ParseRecords(path, b, images, warnings)
}

func loadImageFs(path string) (ImageFs, error) {
	b, err := readFile(path)
	if err != nil {
		return ImageFs{}, err
	}
	return ParseImageFs(path, b)
}

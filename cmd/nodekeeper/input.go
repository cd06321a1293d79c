package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/decode"
	"github.com/nodekeeper/nodekeeper/internal/snapshot"
)

// maxInputSizeKey is the context key of the --max-input-size limit, in bytes.
type maxInputSizeKey struct{}

// registerMaxInputSize adds the global --max-input-size flag to root and puts
// its value in the context of the command that runs.
func registerMaxInputSize(root *cobra.Command) {
	var size string
	root.PersistentFlags().StringVar(&size, "max-input-size", "256Mi",
		"largest input file read, in bytes or as a quantity (e.g. 1Gi); a larger file, FIFO or device is an error")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		limit, err := decode.ParseSize(size)
		if err != nil {
			return flagError{fmt.Errorf("--max-input-size: %w", err)}
		}
		cmd.SetContext(context.WithValue(cmd.Context(), maxInputSizeKey{}, limit))
		return nil
	}
}

// readInput reads the input file path through decode.ReadFile, with the
// --max-input-size limit held by ctx, giving up when ctx is done. Every error
// is bad input (a file that cannot be read or is too large).
func readInput(ctx context.Context, path string) ([]byte, error) {
	limit, _ := ctx.Value(maxInputSizeKey{}).(int64)
	data, err := decode.ReadFile(ctx, path, limit)
	if err != nil {
		return nil, decode.Bad(err)
	}
	return data, nil
}

// loadPods reads a pods file (snapshot.ParsePods).
func loadPods(ctx context.Context, path string) ([]*v1.Pod, error) {
	data, err := readInput(ctx, path)
	if err != nil {
		return nil, err
	}
	return snapshot.ParsePods(path, data)
}

// loadPod reads a file of exactly one pod.
func loadPod(ctx context.Context, path string) (*v1.Pod, error) {
	pods, err := loadPods(ctx, path)
	if err != nil {
		return nil, err
	}
	return snapshot.OnePod(path, pods)
}

// loadSummary reads a kubelet Summary (snapshot.ParseSummary).
func loadSummary(ctx context.Context, path string) (*statsapi.Summary, error) {
	data, err := readInput(ctx, path)
	if err != nil {
		return nil, err
	}
	return snapshot.ParseSummary(path, data)
}

// loadConfig reads a KubeletConfiguration file (config.Parse), with the
// errors config.Load gives.
func loadConfig(ctx context.Context, path string) (*config.Config, error) {
	data, err := readInput(ctx, path)
	if err != nil {
		var tooLarge *decode.TooLargeError
		if errors.As(err, &tooLarge) {
			return nil, err
		}
		return nil, fmt.Errorf("load kubelet configuration: %w", err)
	}
	return config.Parse(path, data)
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/offline/snapshot"
)

// maxInputSizeKey is the context key of the --max-input-size limit, in bytes.
type maxInputSizeKey struct{}

// registerMaxInputSize adds the global --max-input-size flag to root and puts
// its value in the context of the command that runs.
func registerMaxInputSize(root *cobra.Command) {
	var size string
	root.PersistentFlags().StringVar(&size, "max-input-size", "256Mi",
		"largest input file read, in bytes or as a quantity (e.g. 1Gi); a larger file, FIFO or device is an error (run: its configuration, drop-ins and kubeconfig, 10Mi unless given)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		limit, err := decode.ParseSize(size)
		if err != nil {
			return flagError{fmt.Errorf("--max-input-size: %w", err)}
		}
		cmd.SetContext(context.WithValue(cmd.Context(), maxInputSizeKey{}, limit))
		return nil
	}
}

// urlTimeout bounds the fetch of an input given as a URL, from connecting to
// the end of the body.
const urlTimeout = 30 * time.Second

// readInput reads the input file path through decode.ReadFile, with the
// --max-input-size limit held by ctx, giving up when ctx is done. A path
// starting with http:// or https:// is fetched with GET instead (readURL),
// under the same limit. Every error is bad input (a file or URL that cannot
// be read or is too large).
func readInput(ctx context.Context, path string) ([]byte, error) {
	limit, _ := ctx.Value(maxInputSizeKey{}).(int64)
	var data []byte
	var err error
	if isURL(path) {
		data, err = readURL(ctx, path, limit, urlTimeout)
	} else {
		data, err = decode.ReadFile(ctx, path, limit)
	}
	if err != nil {
		return nil, decode.Bad(err)
	}
	return data, nil
}

// isURL reports whether an input names an HTTP(S) URL rather than a file.
func isURL(path string) bool {
	return strings.HasPrefix(path, "http://") || strings.HasPrefix(path, "https://")
}

// readURL GETs url and returns its body, of at most limit bytes (limit <= 0
// means decode.DefaultMaxInputSize; a larger body is a *decode.TooLargeError
// naming the URL). It gives up after timeout or when ctx is done; a status
// other than 200 is an error naming the URL and the status.
func readURL(ctx context.Context, url string, limit int64, timeout time.Duration) ([]byte, error) {
	return fetch(ctx, http.DefaultClient, url, url, limit, timeout)
}

// statusError is an answer other than 200 OK to a GET of name.
type statusError struct {
	name, status string
	code         int
}

func (e *statusError) Error() string { return "GET " + e.name + ": " + e.status }

// fetch is readURL through the client c, naming the input name in its errors
// (a URL, or a unix socket and a path).
func fetch(ctx context.Context, c *http.Client, url, name string, limit int64, timeout time.Duration) ([]byte, error) {
	if limit <= 0 {
		limit = decode.DefaultMaxInputSize
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// Our server, and the kubelet's, answer JSON.
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fetchError(parent, ctx, name, timeout, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &statusError{name: name, code: resp.StatusCode, status: resp.Status}
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, limit+1)); err != nil {
		return nil, fetchError(parent, ctx, name, timeout, err)
	}
	if int64(buf.Len()) > limit {
		return nil, &decode.TooLargeError{Path: name, Limit: limit}
	}
	return buf.Bytes(), nil
}

// fetchError describes err, met while fetching name under ctx (parent with
// timeout): the parent's end as itself (an interrupt), the timeout in words,
// anything else without net/http's repetition of the URL.
func fetchError(parent, ctx context.Context, name string, timeout time.Duration, err error) error {
	if parent.Err() != nil {
		return parent.Err()
	}
	if ctx.Err() != nil {
		return fmt.Errorf("GET %s: no complete answer within %v", name, timeout)
	}
	var ue *neturl.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("GET %s: %w", name, err)
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
// errors config.LoadSources gives for its file.
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

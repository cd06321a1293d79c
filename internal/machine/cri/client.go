package cri

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"
)

// maxMsgSize is the largest gRPC message the client accepts, the kubelet's 16 MiB.
const maxMsgSize = 16 * 1024 * 1024

// DefaultTimeout bounds each call when Options.Timeout is zero (the kubelet's
// runtimeRequestTimeout default, 2m).
const DefaultTimeout = 2 * time.Minute

// Options tune a Client. The zero value is valid.
type Options struct {
	// Timeout bounds every call that has no earlier deadline in its ctx.
	// Zero means DefaultTimeout.
	Timeout time.Duration
}

// Client talks CRI v1 to one runtime endpoint. It is safe for concurrent use;
// Close releases the connection. Methods never retry: callers (the GC and sync
// loops) retry on their next period.
type Client struct {
	conn    *grpc.ClientConn
	rt      runtimeapi.RuntimeServiceClient
	img     runtimeapi.ImageServiceClient
	timeout time.Duration
	lists   *listCaches // the unfiltered lists' items (listcache.go)
}

// New returns a client for endpoint, which is "unix:///path/to.sock" or an
// absolute socket path. It does not connect: the first call does, so New succeeds
// while the runtime is still starting. Use Version to wait for it.
func New(endpoint string, opts Options) (*Client, error) {
	target, err := target(endpoint)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
	)
	if err != nil {
		return nil, fmt.Errorf("cri endpoint %q: %w", endpoint, err)
	}
	t := opts.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	codec, err := newListCodec()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &Client{
		conn:    conn,
		rt:      runtimeapi.NewRuntimeServiceClient(conn),
		img:     runtimeapi.NewImageServiceClient(conn),
		timeout: t,
		lists:   &listCaches{codec: codec},
	}, nil
}

// target turns a containerRuntimeEndpoint value into a gRPC target.
func target(endpoint string) (string, error) {
	switch {
	case endpoint == "":
		return "", errors.New("cri endpoint: empty")
	case strings.HasPrefix(endpoint, "unix://"):
		if !strings.HasPrefix(strings.TrimPrefix(endpoint, "unix://"), "/") {
			return "", fmt.Errorf("cri endpoint %q: want unix:///absolute/path", endpoint)
		}
		return endpoint, nil
	case strings.HasPrefix(endpoint, "/"):
		return "unix://" + endpoint, nil
	}
	return "", fmt.Errorf("cri endpoint %q: only unix sockets are supported (unix:///path)", endpoint)
}

// Close closes the connection. Calls after Close fail.
func (c *Client) Close() error { return c.conn.Close() }

// call makes one unary call, rpc with req, bounded by the client's timeout,
// and classifies its error as op's.
func call[Req, Resp any](ctx context.Context, c *Client, op string, rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r, err := rpc(ctx, req)
	return r, classify(op, err)
}

// Version returns the runtime's name and version; it is the readiness check.
func (c *Client) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	return call(ctx, c, "Version", c.rt.Version, &runtimeapi.VersionRequest{Version: apiVersion})
}

// ListImages lists the runtime's images, optionally filtered.
func (c *Client) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	r, err := call(ctx, c, "ListImages", c.img.ListImages, &runtimeapi.ListImagesRequest{Filter: filter})
	return r.GetImages(), err
}

// ImageStatus returns the image's status. An absent image gives a response with
// a nil Image and no error, as in CRI.
func (c *Client) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	return call(ctx, c, "ImageStatus", c.img.ImageStatus, &runtimeapi.ImageStatusRequest{Image: image, Verbose: verbose})
}

// PullImage pulls an image and returns its reference.
func (c *Client) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sandbox *runtimeapi.PodSandboxConfig) (string, error) {
	r, err := call(ctx, c, "PullImage", c.img.PullImage, &runtimeapi.PullImageRequest{Image: image, Auth: auth, SandboxConfig: sandbox})
	return r.GetImageRef(), err
}

// RemoveImage removes the image. Removing an absent image succeeds (CRI makes it
// idempotent).
func (c *Client) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	_, err := call(ctx, c, "RemoveImage", c.img.RemoveImage, &runtimeapi.RemoveImageRequest{Image: image})
	return err
}

// ImageFsInfo returns the usage of the filesystems holding images and writable layers.
func (c *Client) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return call(ctx, c, "ImageFsInfo", c.img.ImageFsInfo, &runtimeapi.ImageFsInfoRequest{})
}

// RunPodSandbox creates and starts a pod sandbox and returns its ID.
func (c *Client) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	r, err := call(ctx, c, "RunPodSandbox", c.rt.RunPodSandbox, &runtimeapi.RunPodSandboxRequest{Config: config, RuntimeHandler: runtimeHandler})
	return r.GetPodSandboxId(), err
}

// StopPodSandbox stops the sandbox and its containers. Idempotent.
func (c *Client) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	_, err := call(ctx, c, "StopPodSandbox", c.rt.StopPodSandbox, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podSandboxID})
	return err
}

// RemovePodSandbox removes the sandbox and any containers in it. Idempotent.
func (c *Client) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	_, err := call(ctx, c, "RemovePodSandbox", c.rt.RemovePodSandbox, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podSandboxID})
	return err
}

// ListPodSandbox lists sandboxes, optionally filtered. The items of an
// unfiltered list are shared with other callers (an item listed unchanged
// is the object an earlier list returned): callers must not modify them.
func (c *Client) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	if filter == nil {
		return listAll(ctx, c, "ListPodSandbox", methodListPodSandbox, &runtimeapi.ListPodSandboxRequest{}, &c.lists.sandboxes)
	}
	r, err := call(ctx, c, "ListPodSandbox", c.rt.ListPodSandbox, &runtimeapi.ListPodSandboxRequest{Filter: filter})
	return r.GetItems(), err
}

// CreateContainer creates a container in a sandbox and returns its ID.
func (c *Client) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	r, err := call(ctx, c, "CreateContainer", c.rt.CreateContainer, &runtimeapi.CreateContainerRequest{PodSandboxId: podSandboxID, Config: config, SandboxConfig: sandboxConfig})
	return r.GetContainerId(), err
}

// StartContainer starts a created container.
func (c *Client) StartContainer(ctx context.Context, containerID string) error {
	_, err := call(ctx, c, "StartContainer", c.rt.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: containerID})
	return err
}

// StopContainer stops a running container, killing it after timeout seconds.
// The call's own deadline is extended by timeout. Idempotent.
func (c *Client) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout+time.Duration(timeout)*time.Second)
	defer cancel()
	_, err := c.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: containerID, Timeout: timeout})
	return classify("StopContainer", err)
}

// RemoveContainer removes a container. Idempotent.
func (c *Client) RemoveContainer(ctx context.Context, containerID string) error {
	_, err := call(ctx, c, "RemoveContainer", c.rt.RemoveContainer, &runtimeapi.RemoveContainerRequest{ContainerId: containerID})
	return err
}

// ListContainers lists containers, optionally filtered. The items of an
// unfiltered list are shared with other callers (an item listed unchanged
// is the object an earlier list returned): callers must not modify them.
func (c *Client) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	if filter == nil {
		return listAll(ctx, c, "ListContainers", methodListContainers, &runtimeapi.ListContainersRequest{}, &c.lists.containers)
	}
	r, err := call(ctx, c, "ListContainers", c.rt.ListContainers, &runtimeapi.ListContainersRequest{Filter: filter})
	return r.GetContainers(), err
}

// ContainerStatus returns a container's status.
func (c *Client) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	return call(ctx, c, "ContainerStatus", c.rt.ContainerStatus, &runtimeapi.ContainerStatusRequest{ContainerId: containerID, Verbose: verbose})
}

// ExecSync runs cmd in a container and waits for it, at most timeout (0: no
// limit of its own; the client's call timeout still applies). A non-zero exit
// is returned as an error implementing k8s.io/utils/exec.ExitError, with the
// output; a timeout wraps both ErrTimeout and context.DeadlineExceeded. This is
// what exec probes run through.
func (c *Client) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout+timeout)
	defer cancel()
	r, err := c.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{
		ContainerId: containerID, Cmd: cmd, Timeout: int64(timeout.Round(time.Second) / time.Second),
	})
	if err != nil {
		err = classify("ExecSync", err)
		if errors.Is(err, ErrTimeout) {
			err = fmt.Errorf("%w: %w", err, context.DeadlineExceeded)
		}
		return nil, nil, err
	}
	if r.ExitCode != 0 {
		return r.Stdout, r.Stderr, utilexec.CodeExitError{
			Err:  fmt.Errorf("command %q exited with %d: %s", cmd, r.ExitCode, r.Stderr),
			Code: int(r.ExitCode),
		}
	}
	return r.Stdout, r.Stderr, nil
}

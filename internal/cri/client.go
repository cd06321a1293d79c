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
	return &Client{
		conn:    conn,
		rt:      runtimeapi.NewRuntimeServiceClient(conn),
		img:     runtimeapi.NewImageServiceClient(conn),
		timeout: t,
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

func (c *Client) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// Version returns the runtime's name and version; it is the readiness check.
func (c *Client) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	r, err := c.rt.Version(ctx, &runtimeapi.VersionRequest{Version: apiVersion})
	return r, classify("Version", err)
}

// ListImages lists the runtime's images, optionally filtered.
func (c *Client) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	r, err := c.img.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: filter})
	if err != nil {
		return nil, classify("ListImages", err)
	}
	return r.Images, nil
}

// ImageStatus returns the image's status. An absent image gives a response with
// a nil Image and no error, as in CRI.
func (c *Client) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	r, err := c.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: image, Verbose: verbose})
	return r, classify("ImageStatus", err)
}

// PullImage pulls an image and returns its reference.
func (c *Client) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sandbox *runtimeapi.PodSandboxConfig) (string, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	r, err := c.img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: image, Auth: auth, SandboxConfig: sandbox})
	if err != nil {
		return "", classify("PullImage", err)
	}
	return r.ImageRef, nil
}

// RemoveImage removes the image. Removing an absent image succeeds (CRI makes it
// idempotent).
func (c *Client) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	_, err := c.img.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: image})
	return classify("RemoveImage", err)
}

// ImageFsInfo returns the usage of the filesystems holding images and writable layers.
func (c *Client) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	r, err := c.img.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	return r, classify("ImageFsInfo", err)
}

// RunPodSandbox creates and starts a pod sandbox and returns its ID.
func (c *Client) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	r, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: config, RuntimeHandler: runtimeHandler})
	if err != nil {
		return "", classify("RunPodSandbox", err)
	}
	return r.PodSandboxId, nil
}

// StopPodSandbox stops the sandbox and its containers. Idempotent.
func (c *Client) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	_, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podSandboxID})
	return classify("StopPodSandbox", err)
}

// RemovePodSandbox removes the sandbox and any containers in it. Idempotent.
func (c *Client) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	_, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podSandboxID})
	return classify("RemovePodSandbox", err)
}

// ListPodSandbox lists sandboxes, optionally filtered.
func (c *Client) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	r, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: filter})
	if err != nil {
		return nil, classify("ListPodSandbox", err)
	}
	return r.Items, nil
}

// CreateContainer creates a container in a sandbox and returns its ID.
func (c *Client) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	r, err := c.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podSandboxID, Config: config, SandboxConfig: sandboxConfig})
	if err != nil {
		return "", classify("CreateContainer", err)
	}
	return r.ContainerId, nil
}

// StartContainer starts a created container.
func (c *Client) StartContainer(ctx context.Context, containerID string) error {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	_, err := c.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: containerID})
	return classify("StartContainer", err)
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
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	_, err := c.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerID})
	return classify("RemoveContainer", err)
}

// ListContainers lists containers, optionally filtered.
func (c *Client) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	r, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: filter})
	if err != nil {
		return nil, classify("ListContainers", err)
	}
	return r.Containers, nil
}

// ContainerStatus returns a container's status.
func (c *Client) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	r, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID, Verbose: verbose})
	return r, classify("ContainerStatus", err)
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

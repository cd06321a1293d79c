package cri

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageServer is a CRI ImageService whose answers come from function fields.
type imageServer struct {
	runtimeapi.UnimplementedImageServiceServer
	list   func(*runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error)
	remove func(*runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error)
}

func (s *imageServer) ListImages(_ context.Context, r *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return s.list(r)
}

func (s *imageServer) RemoveImage(ctx context.Context, r *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	return s.remove(r)
}

// serve starts a gRPC server with srv on a unix socket in a temp dir and returns
// the endpoint.
func serve(t *testing.T, srv *imageServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	runtimeapi.RegisterImageServiceServer(g, srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return "unix://" + sock
}

func TestClientMapsCodes(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	srv := &imageServer{
		list: func(*runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
			return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: "sha256:a", Size: 3}}}, nil
		},
		remove: func(r *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
			switch r.Image.Image {
			case "missing":
				return nil, status.Error(codes.NotFound, "no such image")
			case "down":
				return nil, status.Error(codes.Unavailable, "restarting")
			case "bad":
				return nil, status.Error(codes.InvalidArgument, "bad ref")
			case "odd":
				return nil, status.Error(codes.Internal, "boom")
			case "slow":
				<-block
			}
			return &runtimeapi.RemoveImageResponse{}, nil
		},
	}
	c, err := New(serve(t, srv), Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	imgs, err := c.ListImages(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"sha256:a"}, []string{imgs[0].Id}); diff != "" {
		t.Errorf("ListImages (-want +got):\n%s", diff)
	}

	tests := []struct {
		image string
		want  error
	}{
		{"ok", nil},
		{"missing", ErrNotFound},
		{"down", ErrUnavailable},
		{"bad", ErrInvalid},
		{"slow", ErrTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.image, func(t *testing.T) {
			t.Parallel()
			err := c.RemoveImage(t.Context(), &runtimeapi.ImageSpec{Image: tc.image})
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("RemoveImage(%q) = %v, want class %v", tc.image, err, tc.want)
			}
		})
	}
	t.Run("unclassified", func(t *testing.T) {
		t.Parallel()
		err := c.RemoveImage(t.Context(), &runtimeapi.ImageSpec{Image: "odd"})
		if err == nil || status.Code(errors.Unwrap(err)) != codes.Internal {
			t.Fatalf("RemoveImage(odd) = %v, want the gRPC error wrapped", err)
		}
		for _, class := range []error{ErrNotFound, ErrUnavailable, ErrTimeout, ErrUnimplemented, ErrInvalid} {
			if errors.Is(err, class) {
				t.Errorf("RemoveImage(odd) = %v, classified as %v", err, class)
			}
		}
	})
}

func TestClientUnavailableEndpoint(t *testing.T) {
	t.Parallel()
	c, err := New("unix://"+filepath.Join(t.TempDir(), "absent.sock"), Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.ListImages(t.Context(), nil)
	if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrTimeout) {
		t.Fatalf("ListImages on a missing socket = %v, want ErrUnavailable", err)
	}
}

func TestTarget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		endpoint, want string
		wantErr        bool
	}{
		{"unix:///run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock", false},
		{"/run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock", false},
		{"", "", true},
		{"unix://relative.sock", "", true},
		{"tcp://127.0.0.1:1234", "", true},
		{"npipe:////./pipe/containerd", "", true},
	}
	for _, tc := range tests {
		got, err := target(tc.endpoint)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("target(%q) = %q, %v; want %q, error %v", tc.endpoint, got, err, tc.want, tc.wantErr)
		}
	}
}

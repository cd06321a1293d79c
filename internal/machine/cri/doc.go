// Package cri is nodekeeper's thin adapter over a CRI v1 runtime (containerd):
// it dials an endpoint such as unix:///run/containerd/containerd.sock and exposes
// the RuntimeService and ImageService calls with the method signatures of the
// k8s.io/cri-api internal interfaces, so the consumer-side interfaces declared by
// imagegc, containergc and the rest are satisfied both by *Client and by the fakes
// in k8s.io/cri-api/pkg/apis/testing.
//
// gRPC status codes become this package's error classes (ErrNotFound,
// ErrUnavailable, ErrTimeout, ErrUnimplemented); callers test them with errors.Is.
// This is the only place in nodekeeper that looks at gRPC codes.
package cri

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/nodekeeper/nodekeeper/internal/testenv/e2eimages"
	"github.com/nodekeeper/nodekeeper/internal/testenv/ociregistry"
)

// startRegistry serves the stand-ins' tarballs on a loopback port of its own
// (ociregistry: read-only, plain HTTP, 127.0.0.1 only) until stop is called,
// and returns the containerd RegistryMirrors that send every registry the
// stand-ins name (registry.k8s.io, gcr.io, docker.io) to it: a spec pulling
// with imagePullPolicy Always, or an image that image GC removed, gets the
// stand-in by its upstream name, and an image without one fails at once
// instead of reaching for the internet. Stop waits for the server to end.
func startRegistry(ctx context.Context, log *slog.Logger, imgs []e2eimages.Image) (map[string]string, func() error, error) {
	var files []string
	for _, im := range imgs {
		files = append(files, im.Path)
	}
	reg, err := ociregistry.Load(log.With("subsystem", "registry"), files...)
	if err != nil {
		return nil, nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("the stand-ins' registry: %w", err)
	}
	url := "http://" + l.Addr().String()
	mirrors := map[string]string{}
	for _, host := range reg.Registries() {
		mirrors[host] = url
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- reg.Serve(sctx, l) }()
	log.Info("the stand-ins' registry", "url", url, "mirrors", reg.Registries(), "images", len(reg.Refs()),
		"importOnly", reg.Unservable)
	return mirrors, func() error { cancel(); return <-done }, nil
}

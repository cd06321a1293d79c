package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/nodekeeper/nodekeeper/internal/testenv/e2eimages"
	"github.com/nodekeeper/nodekeeper/internal/testenv/kubebuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// buildImages writes the OCI tarballs the runs import into dir: the
// stand-ins of the suite's e2e test images (their pause image is the runs'
// sandbox image), of agnhost and sampledeviceplugin the binaries built from
// hack/kube.
func buildImages(ctx context.Context, root, dir, agnhost, sampleDevicePlugin string) ([]string, []e2eimages.Image, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	build := func(name string) (string, error) {
		bin := filepath.Join(dir, name+".bin")
		cmd := exec.CommandContext(ctx, toolbuild.GoTool(), "build", "-o", bin, "./images/"+name)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build ./images/%s: %w\n%s", name, err, out)
		}
		return bin, nil
	}
	bin, err := build("pause")
	if err != nil {
		return nil, nil, err
	}
	nmeter, err := build("nmeter")
	if err != nil {
		return nil, nil, err
	}
	porter, err := kubebuild.PorterDir()
	if err != nil {
		return nil, nil, err
	}
	opts := e2eimages.Options{Agnhost: agnhost, Pause: bin, Nmeter: nmeter, Porter: porter, SampleDevicePlugin: sampleDevicePlugin}
	// Build names what is missing, and the apt-get command where a package
	// provides it.
	imgs, err := e2eimages.Build(filepath.Join(dir, "e2e"), opts)
	if err != nil {
		return nil, nil, err
	}
	var paths []string
	for _, im := range imgs {
		paths = append(paths, im.Path)
	}
	return paths, imgs, nil
}

package devicemanager

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// registration is a validated Register request on its way to the Run loop;
// reply receives the outcome of connecting to the plugin (buffered).
type registration struct {
	req   *pluginapi.RegisterRequest
	reply chan error
}

// registrar serves the Registration service on kubelet.sock.
type registrar struct {
	pluginapi.UnimplementedRegistrationServer
	m *Manager
}

// Register validates the request, then has the Run loop connect to the
// plugin; it answers once the plugin's options were read, so a plugin that
// cannot be reached learns it from the error.
func (r registrar) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	m := r.m
	m.metrics.registrations.WithLabelValues(req.GetResourceName()).Inc()
	log := m.log.With("resourceName", req.GetResourceName(), "endpoint", req.GetEndpoint())
	log.Info("Got registration request from device plugin")
	if err := validateRegistration(req); err != nil {
		log.Info("Rejected device plugin registration", "err", err)
		return &pluginapi.Empty{}, err
	}
	reg := registration{req: req, reply: make(chan error, 1)}
	select {
	case m.regC <- reg:
	case <-ctx.Done():
		return &pluginapi.Empty{}, ctx.Err()
	}
	select {
	case err := <-reg.reply:
		if err != nil {
			log.Info("Device plugin registration failed", "err", err)
			return &pluginapi.Empty{}, err
		}
		return &pluginapi.Empty{}, nil
	case <-ctx.Done():
		return &pluginapi.Empty{}, ctx.Err()
	}
}

// validateRegistration applies the kubelet's checks with its error texts;
// the resource name must be an extended resource name
// (nodeapi.IsExtendedResourceName).
func validateRegistration(req *pluginapi.RegisterRequest) error {
	if !slices.Contains(pluginapi.SupportedVersions[:], req.GetVersion()) {
		return fmt.Errorf("requested API version %q is not supported by kubelet. Supported versions are %q",
			req.GetVersion(), pluginapi.SupportedVersions)
	}
	if !nodeapi.IsExtendedResourceName(v1.ResourceName(req.GetResourceName())) {
		return fmt.Errorf("the ResourceName %q is invalid", req.GetResourceName())
	}
	if !plainFileName(req.GetEndpoint()) {
		return fmt.Errorf("the Endpoint %q is invalid: it must be a file name in the device plugin directory", req.GetEndpoint())
	}
	return nil
}

// plainFileName reports whether name names a file directly inside a
// directory: not empty, not "." or "..", and without a path separator, so
// that joining it to the plugin directory cannot leave that directory.
func plainFileName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

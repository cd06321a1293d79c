package kubenode

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ReadSystemInfo returns the host's part of the Node's status.nodeInfo as the
// kubelet reports it: machineID (/etc/machine-id, else
// /var/lib/dbus/machine-id), systemUUID (/sys/class/dmi/id/product_uuid),
// bootID (/proc/sys/kernel/random/boot_id), kernelVersion
// (/proc/sys/kernel/osrelease), osImage (PRETTY_NAME of /etc/os-release, else
// "Linux"), operatingSystem and architecture (the agent's GOOS and GOARCH).
// The files are read under root ("" is "/"). A missing file leaves its field
// empty, as it does for the kubelet (containers and VMs often lack
// product_uuid); other read errors are returned, joined, with the fields that
// could be read. The container runtime and kubelet versions are left empty:
// they are not host files.
func ReadSystemInfo(root string) (v1.NodeSystemInfo, error) {
	if root == "" {
		root = "/"
	}
	var errs []error
	read := func(paths ...string) string {
		for _, p := range paths {
			b, err := os.ReadFile(filepath.Join(root, p))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				return ""
			}
			return string(bytes.TrimSpace(b))
		}
		return ""
	}
	info := v1.NodeSystemInfo{
		MachineID:       read("etc/machine-id", "var/lib/dbus/machine-id"),
		SystemUUID:      read("sys/class/dmi/id/product_uuid"),
		BootID:          read("proc/sys/kernel/random/boot_id"),
		KernelVersion:   read("proc/sys/kernel/osrelease"),
		OSImage:         "Linux",
		OperatingSystem: runtime.GOOS,
		Architecture:    runtime.GOARCH,
	}
	if osr := read("etc/os-release"); osr != "" {
		if name, err := prettyName(osr); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(root, "etc/os-release"), err))
		} else if name != "" {
			info.OSImage = name
		}
	}
	return info, errors.Join(errs...)
}

// prettyName returns the PRETTY_NAME value of an os-release file's text,
// unquoted; "" when the file has none.
func prettyName(osRelease string) (string, error) {
	sc := bufio.NewScanner(strings.NewReader(osRelease))
	for sc.Scan() {
		v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "PRETTY_NAME=")
		if !ok {
			continue
		}
		switch {
		case len(v) >= 2 && v[0] == '"':
			u, err := strconv.Unquote(v)
			if err != nil {
				return "", fmt.Errorf("PRETTY_NAME %s: %w", v, err)
			}
			return u, nil
		case len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'':
			return v[1 : len(v)-1], nil
		default:
			return v, nil
		}
	}
	return "", sc.Err()
}

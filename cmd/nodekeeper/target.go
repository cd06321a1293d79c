package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/nodekeeper/nodekeeper/internal/core/localpods"
	"github.com/nodekeeper/nodekeeper/internal/daemon"
)

// defaultSocket is where the commands that talk to a running agent find it
// unless told otherwise: the root-only unix socket in the default root
// directory.
var defaultSocket = filepath.Join(daemon.DefaultRootDir, localpods.SocketName)

// agentTarget is where a command reaches a running agent: its root-only unix
// socket, ROOT_DIR/nodekeeper.sock (--root-dir, or --socket for another
// path), which serves every read and the pod changes; or, for the reads a
// read-only port serves, that port's URL (--server). Nothing changes pods
// through a TCP port.
type agentTarget struct {
	rootDir, socket, server string
	// socketOnly, set for the commands that change pods or reach into
	// containers, says what only the socket serves: --server is refused.
	socketOnly string
}

// flags adds --root-dir, --socket and --server to cmd; writes marks a
// command that changes pods.
func (a *agentTarget) flags(cmd *cobra.Command, writes bool) {
	if writes {
		a.socketFlags(cmd, "pods change")
		return
	}
	a.socketFlags(cmd, "")
	cmd.Flags().StringVar(&a.server, "server", "", "base URL of a read-only port (readOnlyPort) to read instead of the socket")
}

// socketFlags adds --root-dir and --socket to cmd and, when only is not
// empty (what only the socket serves: "pods change"), a hidden --server
// that is refused saying so.
func (a *agentTarget) socketFlags(cmd *cobra.Command, only string) {
	a.socketOnly = only
	f := cmd.Flags()
	f.StringVar(&a.rootDir, "root-dir", daemon.DefaultRootDir, "the running nodekeeper's root directory (run --root-dir): its socket is ROOT_DIR/"+localpods.SocketName)
	f.StringVar(&a.socket, "socket", "", "the running nodekeeper's unix socket, instead of the one in --root-dir")
	if only != "" {
		// Kept so that a script passing it learns why it does not work.
		f.StringVar(&a.server, "server", "", "not accepted: "+only+" only through the unix socket")
		_ = f.MarkHidden("server")
	}
}

// client returns the HTTP client, the base URL of the requests and the
// socket ("" for --server). Flag errors are usage errors.
func (a *agentTarget) client(cmd *cobra.Command) (*http.Client, string, string, error) {
	var set []string
	for _, name := range []string{"server", "socket", "root-dir"} {
		if cmd.Flags().Changed(name) {
			set = append(set, "--"+name)
		}
	}
	if cmd.Flags().Changed("server") && a.socketOnly != "" {
		return nil, "", "", flagError{fmt.Errorf("--server: %s only through the running nodekeeper's unix socket, never through a TCP port: drop --server (see --root-dir and --socket)", a.socketOnly)}
	}
	if len(set) > 1 {
		return nil, "", "", flagError{fmt.Errorf("%s: give one of them", strings.Join(set, " and "))}
	}
	if a.server != "" {
		if !isURL(a.server) {
			return nil, "", "", flagError{fmt.Errorf("--server %q: want an http:// or https:// URL", a.server)}
		}
		return http.DefaultClient, strings.TrimSuffix(a.server, "/"), "", nil
	}
	sock := a.socket
	if sock == "" {
		if a.rootDir == "" {
			return nil, "", "", flagError{errors.New("--root-dir: want a directory")}
		}
		sock = filepath.Join(a.rootDir, localpods.SocketName)
	}
	return unixClient(sock), "http://localhost", sock, nil
}

// unixClient returns an HTTP client whose every request goes to the unix
// socket sock.
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// unreachable adds to err, met reaching the agent at sock (or the URL when
// sock is ""), what the user may do about it.
func unreachable(sock string, err error) error {
	switch {
	case sock != "" && (errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)):
		return fmt.Errorf("%w (the socket is root's alone: are you root?)", err)
	case sock != "" && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)):
		return fmt.Errorf("%w (is 'nodekeeper run' running with this root directory?)", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w (is 'nodekeeper run' serving there? its readOnlyPort is off unless set; see --server)", err)
	}
	return err
}

// readAgent GETs path from the agent through c (base and sock as client returns
// them), under --max-input-size and urlTimeout; errors name the socket or URL
// and say what to do when the agent cannot be reached. It returns the body
// and the name to give it in further errors.
func readAgent(ctx context.Context, c *http.Client, base, sock, path string) ([]byte, string, error) {
	name := base + path
	if sock != "" {
		name = sock + " " + path
	}
	limit, _ := ctx.Value(maxInputSizeKey{}).(int64)
	data, err := fetch(ctx, c, base+path, name, limit, urlTimeout)
	if err != nil {
		return nil, name, unreachable(sock, err)
	}
	return data, name, nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// applyTimeout bounds an apply request: the agent admits the pods before it
// answers.
const applyTimeout = time.Minute

// localTarget is where the pod-changing commands reach a running agent: its
// loopback HTTP port (--server) or its unix socket (--socket).
type localTarget struct{ server, socket string }

func (lt *localTarget) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&lt.server, "server", defaultServer, "base URL of the running nodekeeper (a loopback address)")
	cmd.Flags().StringVar(&lt.socket, "socket", "", "the running nodekeeper's unix socket (ROOT_DIR/nodekeeper.sock) instead of --server")
}

// client returns the HTTP client and the base URL of the requests.
func (lt *localTarget) client(cmd *cobra.Command) (*http.Client, string, error) {
	if cmd.Flags().Changed("server") && cmd.Flags().Changed("socket") {
		return nil, "", flagError{errors.New("--server and --socket: give one of them")}
	}
	if lt.socket != "" {
		sock := lt.socket
		return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}, "http://nodekeeper", nil
	}
	if !isURL(lt.server) {
		return nil, "", flagError{fmt.Errorf("--server %q: want an http:// or https:// URL", lt.server)}
	}
	return http.DefaultClient, strings.TrimSuffix(lt.server, "/"), nil
}

// where names the agent in errors.
func (lt *localTarget) where() string {
	if lt.socket != "" {
		return lt.socket
	}
	return lt.server
}

// do sends req and decodes a success answer (want) into out; a failure
// answer is returned as an error with the server's one-line message, bad
// input (exit 2) for a 4xx status.
func (lt *localTarget) do(c *http.Client, req *http.Request, want int, out any) error {
	resp, err := c.Do(req)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("%s %s: %w (is 'nodekeeper run' serving there? see --server and --socket)", req.Method, lt.where(), err)
		}
		return fmt.Errorf("%s %s: %w", req.Method, lt.where(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, lt.where(), err)
	}
	if resp.StatusCode == want {
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("%s %s: answer: %w", req.Method, lt.where(), err)
		}
		return nil
	}
	msg := strings.TrimSpace(string(body))
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Message != "" {
		msg = st.Message
	}
	if msg == "" {
		msg = resp.Status
	}
	err = errors.New(strings.ReplaceAll(msg, "\n", " "))
	if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusMethodNotAllowed {
		return badInput(err)
	}
	return fmt.Errorf("%s %s: %s", req.Method, lt.where(), err)
}

func newApplyCmd() *cobra.Command {
	var file string
	var lt localTarget
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--server URL | --socket PATH]",
		Short: "Create the pods of a manifest on a running nodekeeper, as ordinary (not static) pods",
		Long: `Sends FILE (YAML or JSON: Pods, a PodList or a List) to a running 'nodekeeper
run', which stores the pods in its root directory (they survive restarts),
gives each a random UID and runs them through admission. Unlike static pods
they are not critical unless their priorityClassName is system-node-critical
or system-cluster-critical, so eviction and preemption may stop them.

All pods of the file are created or none: a pod that exists already (same
namespace and name) or is invalid fails the command with exit code 2.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return flagError{errors.New("apply needs -f FILE")}
			}
			c, base, err := lt.client(cmd)
			if err != nil {
				return err
			}
			data, err := readInput(cmd.Context(), file)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), applyTimeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost,
				base+"/pods?filename="+neturl.QueryEscape(file), strings.NewReader(string(data)))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/yaml")
			var list v1.PodList
			if err := lt.do(c, req, http.StatusCreated, &list); err != nil {
				return err
			}
			for _, p := range list.Items {
				fmt.Fprintf(cmd.OutOrStdout(), "pod/%s created (namespace %s, uid %s)\n", p.Name, p.Namespace, p.UID)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the manifest file (or an http(s) URL)")
	lt.flags(cmd)
	return cmd
}

func newDeleteCmd() *cobra.Command {
	del := &cobra.Command{
		Use:   "delete RESOURCE",
		Short: "Delete what 'nodekeeper apply' created on a running nodekeeper (RESOURCE: pod)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var ns string
	var grace int64
	var lt localTarget
	pod := &cobra.Command{
		Use:   "pod NAME [-n NAMESPACE] [--grace-period SECONDS] [--server URL | --socket PATH]",
		Short: "Delete a pod created with 'nodekeeper apply', gracefully",
		Long: `Asks a running 'nodekeeper run' to delete the pod: its containers get the
grace period (the pod's terminationGracePeriodSeconds unless --grace-period
is given) to stop, then the pod is forgotten. The command returns once the
pod is gone. Static pods are deleted by removing their manifest instead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, base, err := lt.client(cmd)
			if err != nil {
				return err
			}
			url := base + "/pods/" + neturl.PathEscape(ns) + "/" + neturl.PathEscape(args[0])
			if grace >= 0 {
				url += "?gracePeriodSeconds=" + strconv.FormatInt(grace, 10)
			}
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodDelete, url, nil)
			if err != nil {
				return err
			}
			var p v1.Pod
			if err := lt.do(c, req, http.StatusOK, &p); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pod %q deleted (namespace %s, uid %s)\n", p.Name, p.Namespace, p.UID)
			return nil
		},
	}
	pod.Flags().StringVarP(&ns, "namespace", "n", v1.NamespaceDefault, "the pod's namespace")
	pod.Flags().Int64Var(&grace, "grace-period", -1, "seconds the containers get to stop; -1: the pod's own")
	lt.flags(pod)
	del.AddCommand(pod)
	return del
}

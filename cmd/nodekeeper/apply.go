package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// applyTimeout bounds an apply request: the agent admits the pods before it
// answers.
const applyTimeout = time.Minute

// do sends req to the agent at sock (or the URL when sock is "") through c
// and decodes a success answer (want) into out; a failure answer is returned
// as an error with the server's one-line message, bad input (exit 2) for a
// 4xx status but 404 (badRequest).
func (a *agentTarget) do(c *http.Client, sock string, req *http.Request, want int, out any) error {
	where := sock
	if where == "" {
		where = a.server
	}
	resp, err := c.Do(req)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%s %s: %w", req.Method, where, unreachable(sock, err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, where, err)
	}
	if resp.StatusCode == want {
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("%s %s: answer: %w", req.Method, where, err)
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
	if badRequest(resp.StatusCode) {
		return badInput(err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return err // an unknown pod: exit 1, as kubectl's NotFound
	}
	return fmt.Errorf("%s %s: %s", req.Method, where, err)
}

// badRequest reports whether the agent refused a request for what the
// command line or its file said (a 4xx status: a malformed or refused pod, a
// name taken), a usage error; an unknown pod (404) is a runtime error, as
// are the agent's own failures (5xx) and 405.
func badRequest(code int) bool {
	return code >= 400 && code < 500 && code != http.StatusMethodNotAllowed && code != http.StatusNotFound
}

func newApplyCmd() *cobra.Command {
	var file string
	var at agentTarget
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--root-dir DIR | --socket PATH]",
		Short: "Create the pods of a manifest on a running nodekeeper, as ordinary (not static) pods",
		Long: `Sends FILE (YAML or JSON: Pods, a PodList or a List) to a running 'nodekeeper
run' through its unix socket ROOT_DIR/nodekeeper.sock (root only; default
` + defaultSocket + `), which stores the pods in its root directory (they survive restarts),
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
			c, base, sock, err := at.client(cmd)
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
			if err := at.do(c, sock, req, http.StatusCreated, &list); err != nil {
				return err
			}
			for _, p := range list.Items {
				fmt.Fprintf(cmd.OutOrStdout(), "pod/%s created (namespace %s, uid %s)\n", p.Name, p.Namespace, p.UID)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the manifest file (or an http(s) URL)")
	at.flags(cmd, true)
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
	var at agentTarget
	pod := &cobra.Command{
		Use:   "pod NAME [-n NAMESPACE] [--grace-period SECONDS] [--root-dir DIR | --socket PATH]",
		Short: "Delete a pod created with 'nodekeeper apply', gracefully",
		Long: `Asks a running 'nodekeeper run', through its unix socket (root only; default
` + defaultSocket + `), to delete the pod: its containers get the
grace period (the pod's terminationGracePeriodSeconds unless --grace-period
is given) to stop, then the pod is forgotten. The command returns once the
pod is gone. Static pods are deleted by removing their manifest instead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, base, sock, err := at.client(cmd)
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
			if err := at.do(c, sock, req, http.StatusOK, &p); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pod %q deleted (namespace %s, uid %s)\n", p.Name, p.Namespace, p.UID)
			return nil
		},
	}
	pod.Flags().StringVarP(&ns, "namespace", "n", v1.NamespaceDefault, "the pod's namespace")
	pod.Flags().Int64Var(&grace, "grace-period", -1, "seconds the containers get to stop; -1: the pod's own")
	at.flags(pod, true)
	del.AddCommand(pod)
	return del
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
)

// defaultContainerAnnotation names the container kubectl picks when none is
// given.
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// podRef is the pod and container a logs or exec command names.
type podRef struct {
	namespace, container string
}

// flags adds -n and -c to cmd.
func (p *podRef) flags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&p.namespace, "namespace", "n", "default", "the pod's namespace")
	cmd.Flags().StringVarP(&p.container, "container", "c", "", "the container (default: the pod's "+defaultContainerAnnotation+" annotation, else its only container)")
}

// resolve reads the agent's pods and returns pod name of p's namespace and
// the container p names (or the default one), with the container's status
// (nil when it has none yet). An unknown pod or container is an error that
// says what there is.
func (p *podRef) resolve(ctx context.Context, c *http.Client, base, sock, name string) (*v1.Pod, string, *v1.ContainerStatus, error) {
	pods, err := fetchPods(ctx, c, base, sock)
	if err != nil {
		return nil, "", nil, err
	}
	var pod *v1.Pod
	for i := range pods {
		if pods[i].Namespace == p.namespace && pods[i].Name == name {
			pod = &pods[i]
		}
	}
	if pod == nil {
		return nil, "", nil, fmt.Errorf("pod %q not found in namespace %q (nodekeeper get pods lists the pods)", name, p.namespace)
	}
	var names, inits, ephemerals []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	for _, c := range pod.Spec.InitContainers {
		inits = append(inits, c.Name)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		ephemerals = append(ephemerals, c.Name)
	}
	ctr := p.container
	switch {
	case ctr != "":
		if !slices.Contains(names, ctr) && !slices.Contains(inits, ctr) && !slices.Contains(ephemerals, ctr) {
			return nil, "", nil, fmt.Errorf("container %q is not valid for pod %q: %s", ctr, pod.Name, choices(names, inits, ephemerals))
		}
	case pod.Annotations[defaultContainerAnnotation] != "" && slices.Contains(names, pod.Annotations[defaultContainerAnnotation]):
		ctr = pod.Annotations[defaultContainerAnnotation]
	case len(names) == 1:
		ctr = names[0]
	default:
		return nil, "", nil, fmt.Errorf("a container name must be specified for pod %s, %s (-c)", pod.Name, choices(names, inits, ephemerals))
	}
	for _, sts := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for i := range sts {
			if sts[i].Name == ctr {
				return pod, ctr, &sts[i], nil
			}
		}
	}
	return pod, ctr, nil, nil
}

// choices lists a pod's containers as kubectl does.
func choices(names, inits, ephemerals []string) string {
	s := fmt.Sprintf("choose one of: [%s]", strings.Join(names, " "))
	if len(inits) > 0 {
		s += fmt.Sprintf(" or one of the init containers: [%s]", strings.Join(inits, " "))
	}
	if len(ephemerals) > 0 {
		s += fmt.Sprintf(" or one of the ephemeral containers: [%s]", strings.Join(ephemerals, " "))
	}
	return s
}

// agentRefusal is the error for a logs or exec request the agent answered
// with status and body: its message on one line, or, where the agent has no
// such route, why that may be.
func agentRefusal(sock, what string, status int, body []byte) error {
	msg := strings.Join(strings.Fields(string(body)), " ")
	if status == http.StatusNotFound && msg == "404 page not found" {
		return fmt.Errorf("the nodekeeper at %s serves no %s: its enableDebuggingHandlers is false, or it is older than this command", sock, what)
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return errors.New(msg)
}

func newLogsCmd() *cobra.Command {
	var (
		at                           agentTarget
		ref                          podRef
		follow, previous, timestamps bool
		tail                         int64
	)
	cmd := &cobra.Command{
		Use:   "logs POD [-c CONTAINER] [-n NAMESPACE] [-f] [--previous] [--tail N] [--timestamps] [--root-dir DIR | --socket PATH]",
		Short: "Print a container's log, as kubectl logs does",
		Long: `Reads the log of a container of a pod that a running 'nodekeeper run' runs,
from the CRI log file the runtime writes (/var/log/pods/NS_POD_UID/CONTAINER/N.log),
through the agent's root-only unix socket ROOT_DIR/nodekeeper.sock (default
` + defaultSocket + `; the read-only port never serves logs). The container is
-c, else the pod's ` + defaultContainerAnnotation + ` annotation, else its only
container. With -f it goes on printing what the container writes, across
log rotations, and ends when the container stops (exit 0) or the pod is
deleted (exit 1, said on stderr).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tail < -1 {
				return badInput(fmt.Errorf("--tail %d: want a number of lines, or -1 for all", tail))
			}
			c, base, sock, err := at.client(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			pod, ctr, _, err := ref.resolve(ctx, c, base, sock, args[0])
			if err != nil {
				return err
			}
			q := url.Values{}
			for name, on := range map[string]bool{"follow": follow, "previous": previous, "timestamps": timestamps} {
				if on {
					q.Set(name, "true")
				}
			}
			if tail >= 0 {
				q.Set("tailLines", strconv.FormatInt(tail, 10))
			}
			path := "/containerLogs/" + url.PathEscape(pod.Namespace) + "/" + url.PathEscape(pod.Name) + "/" + url.PathEscape(ctr) + "?" + q.Encode()
			if err := copyLog(ctx, c, base, sock, path, cmd.OutOrStdout()); err != nil {
				return err
			}
			if !follow {
				return nil
			}
			// The follow ended: the container stopped, or the pod is gone.
			pods, err := fetchPods(ctx, c, base, sock)
			if err != nil {
				return err
			}
			for _, p := range pods {
				if p.UID == pod.UID && p.Namespace == pod.Namespace && p.Name == pod.Name {
					return nil
				}
			}
			// kubectl logs -f ends with exit 0 when the pod is deleted (the
			// kubelet ends the stream once the container stopped); we say why.
			fmt.Fprintf(cmd.ErrOrStderr(), "nodekeeper: pod %s/%s was deleted while its log was followed\n", pod.Namespace, pod.Name)
			return nil
		},
	}
	ref.flags(cmd)
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "go on printing what the container writes until it stops")
	f.BoolVarP(&previous, "previous", "p", false, "print the log of the container's previous instance (before its last restart)")
	f.Int64Var(&tail, "tail", -1, "print only the last N lines (-1: all)")
	f.BoolVar(&timestamps, "timestamps", false, "prefix each line with the time the runtime took it (RFC 3339)")
	at.socketFlags(cmd, "container logs are served")
	return cmd
}

// copyLog GETs the log at path from the agent and copies it to w as it
// comes; an answer other than 200 is the agent's one-line error.
func copyLog(ctx context.Context, c *http.Client, base, sock, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return unreachable(sock, fmt.Errorf("GET %s %s: %w", sock, strings.SplitN(path, "?", 2)[0], errors.Unwrap(err)))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return agentRefusal(sock, "container logs", resp.StatusCode, body)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("reading the log from %s: %w", sock, err)
	}
	return nil
}

package kubeletserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Followed logs: how often the file is polled for new lines, and every how
// many polls the container is checked for having stopped.
const (
	followPoll       = 200 * time.Millisecond
	followStateEvery = 10
)

// logOptions are the PodLogOptions of a /containerLogs request.
type logOptions struct {
	follow, previous, timestamps bool
	// tail is the number of lines from the end; < 0 is every line.
	tail int64
	// limit is the most bytes to write; < 0 is no limit.
	limit int64
	// since drops lines written before it; zero keeps every line.
	since time.Time
}

// errBadQuery and errInvalid are a query that does not decode and one whose
// values are out of range; the kubelet answers them with these JSON bodies.
var (
	errBadQuery = errors.New(`{"message": "Unable to decode query."}`)
	errInvalid  = errors.New(`{"message": "Invalid request."}`)
)

// parseLogOptions reads q's follow, previous, timestamps, tailLines (or the
// older tail, where "all" is every line), limitBytes, sinceSeconds (back from
// now) and sinceTime (RFC 3339). It returns errBadQuery or errInvalid.
func parseLogOptions(q url.Values, now time.Time) (logOptions, error) {
	o := logOptions{tail: -1, limit: -1}
	boolean := func(name string, dst *bool) error {
		if v := q.Get(name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return errBadQuery
			}
			*dst = b
		}
		return nil
	}
	integer := func(name string) (int64, bool, error) {
		v := q.Get(name)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false, errBadQuery
		}
		return n, true, nil
	}
	for name, dst := range map[string]*bool{"follow": &o.follow, "previous": &o.previous, "timestamps": &o.timestamps} {
		if err := boolean(name, dst); err != nil {
			return o, err
		}
	}
	tailName := "tailLines"
	if t := q.Get("tail"); t != "" {
		tailName = "tail"
		if t == "all" {
			tailName = ""
		}
	}
	if tailName != "" {
		n, ok, err := integer(tailName)
		if err != nil {
			return o, err
		}
		if ok {
			if n < 0 {
				return o, errInvalid
			}
			o.tail = n
		}
	}
	n, ok, err := integer("limitBytes")
	if err != nil {
		return o, err
	}
	if ok {
		if n < 1 {
			return o, errInvalid
		}
		o.limit = n
	}
	secs, hasSecs, err := integer("sinceSeconds")
	if err != nil {
		return o, err
	}
	if v := q.Get("sinceTime"); v != "" {
		if hasSecs {
			return o, errInvalid
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return o, errBadQuery
		}
		o.since = t
	}
	if hasSecs {
		if secs < 1 {
			return o, errInvalid
		}
		o.since = now.Add(-time.Duration(secs) * time.Second)
	}
	if s := q.Get("stream"); s != "" && s != string(v1.LogStreamAll) {
		return o, fmt.Errorf("unable to return the given log stream: %q", s)
	}
	return o, nil
}

// logContainer returns the runtime ID of the container whose logs a request
// for name of pod (with previous) reads, or the kubelet's error saying why
// there is none.
func logContainer(pod *v1.Pod, name string, previous bool) (string, error) {
	st, ok := containerStatus(pod, name)
	if !ok {
		return "", fmt.Errorf("container %q in pod %q is not available", name, pod.Name)
	}
	last := st.LastTerminationState.Terminated
	switch state := st.State; {
	case previous:
		if last == nil || last.ContainerID == "" {
			return "", fmt.Errorf("previous terminated container %q in pod %q not found", name, pod.Name)
		}
		return runtimeID(last.ContainerID), nil
	case state.Running != nil:
		return runtimeID(st.ContainerID), nil
	case state.Terminated != nil:
		if state.Terminated.ContainerID != "" {
			return runtimeID(state.Terminated.ContainerID), nil
		}
		if last != nil && last.ContainerID != "" {
			return runtimeID(last.ContainerID), nil
		}
		return "", fmt.Errorf("container %q in pod %q is terminated", name, pod.Name)
	case last != nil:
		if last.ContainerID == "" {
			return "", fmt.Errorf("container %q in pod %q is terminated", name, pod.Name)
		}
		return runtimeID(last.ContainerID), nil
	case state.Waiting != nil:
		switch state.Waiting.Reason {
		case "ErrImagePull":
			return "", fmt.Errorf("container %q in pod %q is waiting to start: image can't be pulled", name, pod.Name)
		case "ImagePullBackOff":
			return "", fmt.Errorf("container %q in pod %q is waiting to start: trying and failing to pull image", name, pod.Name)
		}
		return "", fmt.Errorf("container %q in pod %q is waiting to start: %v", name, pod.Name, state.Waiting.Reason)
	}
	return "", fmt.Errorf("container %q in pod %q is waiting to start - no logs yet", name, pod.Name)
}

// containerLogs serves a container's log, read from the CRI log file the
// runtime reports for it.
func (s *Debugging) containerLogs(w http.ResponseWriter, r *http.Request) {
	opts, err := parseLogOptions(r.URL.Query(), s.clock.Now())
	switch {
	case errors.Is(err, errInvalid):
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	podName, name := r.PathValue("pod"), r.PathValue("container")
	pod := s.findPod(r.PathValue("namespace"), podName)
	if pod == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("pod %q does not exist", podName))
		return
	}
	if containerSpec(pod, name) == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("container %q not found in pod %q", name, podName))
		return
	}
	id, err := logContainer(pod, name, opts.previous)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	st, err := s.rt.ContainerStatus(r.Context(), id, false)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("failed to get container status %q: %v", id, err))
		return
	}
	path := st.GetStatus().GetLogPath()
	f, err := os.Open(path)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("failed to open log file %q: %v", path, err))
		return
	}
	defer func() { _ = f.Close() }()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	running := func(ctx context.Context) bool {
		st, err := s.rt.ContainerStatus(ctx, id, false)
		return err == nil && st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	lr := &logReader{opts: opts, path: path, flush: func() { _ = rc.Flush() }, running: running, poll: s.clock.NewTicker, log: s.log}
	if err := lr.copy(r.Context(), f, w); err != nil && r.Context().Err() == nil {
		s.log.Info("Container log read ended", "pod", pod.Namespace+"/"+pod.Name, "containerName", name, "path", path, "err", err)
	}
}

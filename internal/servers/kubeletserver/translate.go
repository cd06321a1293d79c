package kubeletserver

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	pfconst "k8s.io/apimachinery/pkg/util/portforward"
	rcconst "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
)

// The WebSocket clients of exec, attach and port-forward (kubectl since
// 1.30, through the API server) speak protocols the CRI runtime's streaming
// server does not: this file bridges them to the runtime's SPDY. This is our
// own code rather than k8s.io/apiserver/pkg/util/proxy, which would link
// client-go's informers and with them every API group (see
// internal/cluster/kubeclient).

// Channel numbers of the exec/attach channel protocol.
const (
	chanStdin = iota
	chanStdout
	chanStderr
	chanError
	chanResize
)

const (
	// wsIdleTimeout ends a WebSocket stream nobody reads or writes.
	wsIdleTimeout = 4 * time.Hour
	// statusWriteTimeout bounds writing the final status to the client.
	statusWriteTimeout = 10 * time.Second
	// upgradeTimeout bounds the runtime's answer to the SPDY upgrade.
	upgradeTimeout = 30 * time.Second
)

// translateStream serves a WebSocket (v5.channel.k8s.io) exec or attach
// client by running the session against the runtime's SPDY streaming URL:
// the client's channels become the session's streams, terminal resizes
// are passed on, and the outcome (exit code or error) is written to the
// error channel as a Status.
func (s *Debugging) translateStream(w http.ResponseWriter, r *http.Request, target *url.URL, opts streamOptions) {
	channel := func(on bool, t wsstream.ChannelType) wsstream.ChannelType {
		if on {
			return t
		}
		return wsstream.IgnoreChannel
	}
	channels := make([]wsstream.ChannelType, 5)
	channels[chanStdin] = channel(opts.stdin, wsstream.ReadChannel)
	channels[chanStdout] = channel(opts.stdout, wsstream.WriteChannel)
	channels[chanStderr] = channel(opts.stderr, wsstream.WriteChannel)
	channels[chanError] = wsstream.WriteChannel
	channels[chanResize] = wsstream.ReadChannel
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		rcconst.StreamProtocolV5Name: {Binary: true, Channels: channels},
	})
	conn.SetIdleTimeout(wsIdleTimeout)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		s.log.Info("WebSocket stream not opened", "path", r.URL.Path, "err", err)
		return // Open answered the client
	}
	defer conn.Close()
	// The first write tells the client the streams are ready.
	first := chanError
	switch {
	case opts.stdout:
		first = chanStdout
	case opts.stderr:
		first = chanStderr
	}
	if _, err := streams[first].Write(nil); err != nil {
		s.log.Info("WebSocket stream closed at once", "path", r.URL.Path, "err", err)
		return
	}
	writeStatus := func(st metav1.Status) {
		b, err := json.Marshal(st)
		if err != nil {
			return
		}
		conn.SetWriteDeadline(statusWriteTimeout)
		_, _ = streams[chanError].Write(b)
	}

	ex, err := remotecommand.NewSPDYExecutor(&rest.Config{Host: target.Scheme + "://" + target.Host}, "POST", target)
	if err != nil {
		writeStatus(apierrors.NewInternalError(err).Status())
		return
	}
	so := remotecommand.StreamOptions{Tty: opts.tty}
	if opts.stdin {
		so.Stdin = streams[chanStdin]
	}
	if opts.stdout {
		so.Stdout = streams[chanStdout]
	}
	if opts.stderr {
		so.Stderr = streams[chanStderr]
	}
	if opts.tty {
		sizes := make(chan remotecommand.TerminalSize)
		go resizes(r.Context().Done(), streams[chanResize], sizes)
		so.TerminalSizeQueue = sizeQueue(sizes)
	}
	err = ex.StreamWithContext(r.Context(), so)
	var statusErr *apierrors.StatusError
	var exitErr exec.CodeExitError
	switch {
	case err == nil:
		writeStatus(metav1.Status{Status: metav1.StatusSuccess})
	case errors.As(err, &statusErr):
		writeStatus(statusErr.Status())
	case errors.As(err, &exitErr) && exitErr.Exited():
		writeStatus(exitStatus(exitErr.ExitStatus()))
	default:
		writeStatus(apierrors.NewInternalError(err).Status())
	}
}

// exitStatus is the Status that reports a command's non-zero exit code.
func exitStatus(code int) metav1.Status {
	return metav1.Status{
		Status: metav1.StatusFailure, Reason: rcconst.NonZeroExitCodeReason,
		Message: fmt.Sprintf("command terminated with non-zero exit code: exit status %d", code),
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: rcconst.ExitCodeCauseType, Message: fmt.Sprint(code)}}},
	}
}

// resizes decodes the JSON terminal sizes of the resize channel into out
// until the channel ends or done is closed; it closes out.
func resizes(done <-chan struct{}, in io.Reader, out chan<- remotecommand.TerminalSize) {
	defer close(out)
	dec := json.NewDecoder(in)
	for {
		var size remotecommand.TerminalSize
		if err := dec.Decode(&size); err != nil {
			return
		}
		select {
		case out <- size:
		case <-done:
			return
		}
	}
}

// sizeQueue hands the session the client's terminal sizes.
type sizeQueue <-chan remotecommand.TerminalSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	size, ok := <-q
	if !ok {
		return nil
	}
	return &size
}

// tunnelPortForward serves a WebSocket port-forward client that tunnels SPDY
// (subprotocol "SPDY/3.1+portforward.k8s.io"): it upgrades the runtime's
// streaming URL to SPDY, then the client's WebSocket, and copies the bytes
// between the two, so the client's SPDY session runs against the runtime.
// A refused upgrade is passed back as the runtime's status and body.
func (s *Debugging) tunnelPortForward(w http.ResponseWriter, r *http.Request, target *url.URL) {
	var protocols []string
	for _, p := range gwebsocket.Subprotocols(r) {
		if rest, ok := strings.CutPrefix(p, pfconst.WebsocketsSPDYTunnelingPrefix); ok && strings.HasSuffix(rest, pfconst.KubernetesSuffix) {
			protocols = append(protocols, rest)
		}
	}
	if len(protocols) == 0 {
		writeError(w, http.StatusBadRequest, "unable to upgrade: no tunneling spdy protocols provided")
		return
	}
	upstream, br, resp, err := dialSPDY(r, target, protocols)
	if err != nil {
		s.log.Error("Port-forward upgrade at the runtime failed", "url", target.Redacted(), "err", err)
		writeError(w, http.StatusBadGateway, fmt.Sprintf("runtime streaming server: %v", err))
		return
	}
	defer upstream.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(br, 1<<20))
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
		return
	}
	var answer []string
	if p := strings.TrimSpace(resp.Header.Get("X-Stream-Protocol-Version")); p != "" {
		answer = []string{pfconst.WebsocketsSPDYTunnelingPrefix + p}
	}
	up := gwebsocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }, Subprotocols: answer}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		s.log.Info("Port-forward WebSocket upgrade failed", "path", r.URL.Path, "err", err)
		return // Upgrade answered the client
	}
	client := portforward.NewTunnelingConnection("kubelet-api", ws)
	defer client.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(upstream, client)
		closeWrite(upstream)
	})
	_, _ = io.Copy(client, br) // br holds what the runtime sent after its headers
	_ = client.Close()
	_ = upstream.Close()
	wg.Wait()
}

// closeWrite half-closes c when it can, else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// dialSPDY connects to target (http only: CRI streaming servers listen on
// loopback) and asks to upgrade to SPDY/3.1 with protocols; it returns the
// connection, a reader of it positioned after the response's headers, and
// the response.
func dialSPDY(r *http.Request, target *url.URL, protocols []string) (net.Conn, *bufio.Reader, *http.Response, error) {
	if target.Scheme != "http" {
		return nil, nil, nil, fmt.Errorf("streaming URL scheme %q: only http is supported", target.Scheme)
	}
	host := target.Host
	if target.Port() == "" {
		host = net.JoinHostPort(target.Hostname(), "80")
	}
	var d net.Dialer
	conn, err := d.DialContext(r.Context(), "tcp", host)
	if err != nil {
		return nil, nil, nil, err
	}
	req, err := http.NewRequestWithContext(r.Context(), "POST", target.String(), nil)
	if err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "SPDY/3.1")
	for _, p := range protocols {
		req.Header.Add("X-Stream-Protocol-Version", p)
	}
	_ = conn.SetDeadline(time.Now().Add(upgradeTimeout))
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return conn, bufio.NewReader(resp.Body), resp, nil
	}
	return conn, br, resp, nil
}

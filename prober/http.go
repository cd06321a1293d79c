package prober

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// HTTP runs httpGet probes. Every run is one fresh connection per request,
// closed after the response, as the kubelet's probes are (keep-alives off,
// Connection: close), with no proxy, TLS unverified and SO_LINGER 0
// (dialer.go). Redirects are followed to the same host only, at most ten;
// a redirect to another host is the answer (a warning).
//
// It speaks HTTP/1.1 over the connection itself (net/http's Request.Write and
// ReadResponse) instead of going through an http.Transport: a transport that
// never reuses a connection still runs a reader and a writer goroutine per
// connection, which were a fifth of the agent's CPU per probe.
// Safe for concurrent use.
type HTTP struct {
	dialer *net.Dialer
	tls    *tls.Config
}

// NewHTTP returns the HTTP probe runner.
func NewHTTP() *HTTP {
	return &HTTP{
		dialer: newDialer(),
		tls:    &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes do not verify, like the kubelet's
	}
}

// maxRedirects is how many redirects a probe follows before it fails.
const maxRedirects = 10

// Probe sends t.Request. 2xx is success; 3xx (a redirect not followed) is a
// warning, which counts as success; anything else, a transport error or a
// timeout is failure. At most 10 KiB of the body is read. As the kubelet's,
// a warning's message carries the body ("Probe terminated redirects,
// Response body: ..."), a failure's only the status code, and a transport
// error reads as Go's HTTP client words it (`Get "URL": ...`).
func (h *HTTP) Probe(ctx context.Context, t Target) (Outcome, string, error) {
	if t.Request == nil {
		return OutcomeUnknown, "", errors.New("http probe without a request")
	}
	first := t.Request
	req := first
	for redirects := 0; ; redirects++ {
		res, body, err := h.exchange(ctx, req)
		if err != nil {
			return OutcomeFailure, urlError(req, err), nil
		}
		next, err := redirectTo(first, req, res)
		switch {
		case err != nil:
			return OutcomeFailure, urlError(req, err), nil
		case next != nil && next.URL.Hostname() == first.URL.Hostname():
			if redirects+1 >= maxRedirects {
				return OutcomeFailure, urlError(req, fmt.Errorf("stopped after %d redirects", maxRedirects)), nil
			}
			req = next
			continue
		}
		switch code := res.StatusCode; {
		case code >= 200 && code < 300:
			return OutcomeSuccess, "", nil
		case code >= 300 && code < 400:
			return OutcomeWarning, "Probe terminated redirects, Response body: " + string(body), nil
		default:
			return OutcomeFailure, fmt.Sprintf("HTTP probe failed with statuscode: %d", code), nil
		}
	}
}

// exchange sends req on a new connection and reads the response and up to
// maxOutput of its body (kept only for a 3xx, whose body goes into the
// warning). The connection is closed when it returns.
func (h *HTTP) exchange(ctx context.Context, req *http.Request) (*http.Response, []byte, error) {
	host, port := req.URL.Hostname(), req.URL.Port()
	tlsOn := req.URL.Scheme == "https"
	if port == "" {
		port = "80"
		if tlsOn {
			port = "443"
		}
	}
	c, err := h.dialer.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
	if err != nil {
		if timedOut(ctx) {
			return nil, nil, fmt.Errorf("%v%s", err, awaitingHeaders)
		}
		return nil, nil, err
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(aLongTimeAgo) })
	defer stop()
	conn := c
	if tlsOn {
		cfg := h.tls.Clone()
		cfg.ServerName = host
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, nil, beforeHeaders(ctx, err)
		}
		conn = tc
	}
	out := req.WithContext(ctx) // a shallow copy: the shared request is not modified
	out.Close = true            // Connection: close
	// The request is written into a pooled buffer and sent with one write:
	// Request.Write would wrap conn in a fresh 4 KiB bufio.Writer.
	wb := writeBuffers.Get().(*bytes.Buffer)
	defer writeBuffers.Put(wb)
	wb.Reset()
	if err := out.Write(wb); err != nil {
		return nil, nil, err
	}
	if _, err := conn.Write(wb.Bytes()); err != nil {
		return nil, nil, beforeHeaders(ctx, err)
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(conn)
	defer func() {
		br.Reset(nil) // drops conn
		readers.Put(br)
	}()
	var res *http.Response
	for {
		res, err = http.ReadResponse(br, out)
		if err != nil {
			return nil, nil, beforeHeaders(ctx, err)
		}
		// Informational answers (100 Continue, 103 Early Hints) precede the
		// response, as for Go's client; 101 is a response of its own.
		if res.StatusCode >= 200 || res.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	// The body is not closed: Close would read it to the end. Closing the
	// connection (deferred) ends it.
	var body []byte
	if res.StatusCode >= 300 && res.StatusCode < 400 {
		body, err = io.ReadAll(io.LimitReader(res.Body, maxOutput))
	} else {
		_, err = io.CopyN(io.Discard, res.Body, maxOutput)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		switch {
		case timedOut(ctx):
			err = errors.New("context deadline exceeded (Client.Timeout or context cancellation while reading body)")
		case ctx.Err() != nil:
			err = ctx.Err()
		}
		return nil, nil, fmt.Errorf("read response body: %w", err)
	}
	return res, body, nil
}

// writeBuffers and readers are reused across runs: a probe's request and
// answer buffers are garbage as soon as it ends, and at hundreds of probes a
// second they were a good part of the agent's allocation.
var (
	writeBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	readers      = sync.Pool{New: func() any { return bufio.NewReader(nil) }}
)

// aLongTimeAgo is a deadline in the past: setting it wakes a blocked read
// or write at once.
var aLongTimeAgo = time.Unix(1, 0)

// awaitingHeaders is what Go's HTTP client adds to an error when its
// timeout (the kubelet's probe timeout) ended a request before the answer's
// headers came.
const awaitingHeaders = " (Client.Timeout exceeded while awaiting headers)"

// timedOut reports whether ctx's deadline has passed. The connection's
// deadline is ctx's, and may fire a moment before ctx records it.
func timedOut(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// beforeHeaders is err, an exchange's failure before the answer's headers,
// as Go's HTTP client reports it: a timeout as "context deadline exceeded
// (Client.Timeout exceeded while awaiting headers)", a cancellation as ctx's
// error.
func beforeHeaders(ctx context.Context, err error) error {
	switch {
	case timedOut(ctx):
		return errors.New("context deadline exceeded" + awaitingHeaders)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return err
}

// redirectTo returns the request a redirect answer res to req leads to, nil
// for an answer that is not followed, as Go's HTTP client builds it: 301,
// 302, 303, 307 and 308 with a Location, resolved against req's URL; the
// first request's headers; a custom Host kept only through a relative
// Location; a Referer of the previous URL (none from https to http).
func redirectTo(first, req *http.Request, res *http.Response) (*http.Request, error) {
	switch res.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return nil, nil
	}
	loc := res.Header.Get("Location")
	if loc == "" {
		return nil, nil
	}
	u, err := req.URL.Parse(loc)
	if err != nil {
		return nil, fmt.Errorf("failed to parse Location header %q: %v", loc, err)
	}
	next := &http.Request{
		Method: http.MethodGet, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: first.Header.Clone(),
	}
	if first.Host != "" && first.Host != first.URL.Host {
		if l, _ := url.Parse(loc); l != nil && !l.IsAbs() {
			next.Host = first.Host
		}
	}
	if next.Header == nil {
		next.Header = http.Header{}
	}
	if !(req.URL.Scheme == "https" && u.Scheme == "http") && next.Header.Get("Referer") == "" {
		ref := *req.URL
		ref.User = nil
		next.Header.Set("Referer", ref.String())
	}
	return next, nil
}

// urlError words err as Go's HTTP client does: `Get "URL": err`.
func urlError(req *http.Request, err error) string {
	u := *req.URL
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "***")
	}
	return (&url.Error{Op: "Get", URL: u.String(), Err: err}).Error()
}

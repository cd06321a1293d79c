package prober

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// HTTP runs httpGet probes. One HTTP value, with one transport, serves every
// probe: keep-alives off (each probe is a fresh connection, closed after the
// response, as the kubelet does), no proxy, TLS unverified, SO_LINGER 0
// (dialer.go).
// Safe for concurrent use.
type HTTP struct {
	client *http.Client
}

// NewHTTP returns the HTTP probe runner.
func NewHTTP() *HTTP {
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         newDialer().DialContext,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes do not verify, like the kubelet's
		TLSHandshakeTimeout: 10 * time.Second,
		DisableKeepAlives:   true,
		DisableCompression:  true,
		MaxIdleConnsPerHost: -1,
	}
	return &HTTP{client: &http.Client{Transport: t, CheckRedirect: sameHostRedirects}}
}

// sameHostRedirects follows redirects to the same host, up to ten, and stops
// at a redirect to another host, whose response then counts as a warning.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// Probe sends t.Request. 2xx is success; 3xx (a redirect not followed) is a
// warning, which counts as success; anything else, a transport error or a
// timeout is failure. At most 10 KiB of the body is read. As the kubelet's,
// a warning's message carries the body ("Probe terminated redirects,
// Response body: ..."), a failure's only the status code.
func (h *HTTP) Probe(ctx context.Context, t Target) (Outcome, string, error) {
	if t.Request == nil {
		return OutcomeUnknown, "", errors.New("http probe without a request")
	}
	res, err := h.client.Do(t.Request.WithContext(ctx))
	if err != nil {
		return OutcomeFailure, err.Error(), nil
	}
	defer res.Body.Close()
	redirect := res.StatusCode >= 300 && res.StatusCode < 400
	var body []byte
	if redirect {
		body, err = io.ReadAll(io.LimitReader(res.Body, maxOutput))
	} else {
		_, err = io.CopyN(io.Discard, res.Body, maxOutput)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return OutcomeFailure, fmt.Sprintf("read response body: %v", err), nil
	}
	switch {
	case res.StatusCode >= 200 && res.StatusCode < 300:
		return OutcomeSuccess, "", nil
	case redirect:
		return OutcomeWarning, "Probe terminated redirects, Response body: " + string(body), nil
	}
	return OutcomeFailure, fmt.Sprintf("HTTP probe failed with statuscode: %d", res.StatusCode), nil
}

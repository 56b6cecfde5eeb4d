package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/limitd/limitd/wire"
)

// httpJSON makes one request and decodes a 2xx answer into out. Any other
// status is an error carrying the problem's detail.
func httpJSON(ctx context.Context, hc *http.Client, method, u, token string, body []byte, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer drainClose(resp.Body)
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, httpProblem(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	}
	return resp.StatusCode, nil
}

// drainClose reads what is left of a body so the connection is reused.
func drainClose(rc io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(rc, 64<<10))
	rc.Close()
}

// httpProblem is the error of a non-2xx answer: its status and the problem's
// detail (RFC 9457) or title.
func httpProblem(resp *http.Response) error {
	var p wire.Problem
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_ = json.Unmarshal(data, &p)
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	if msg == "" {
		msg = strings.TrimSpace(string(data))
	}
	return fmt.Errorf("%s %s: %s: %s", resp.Request.Method, resp.Request.URL.Path, resp.Status, msg)
}

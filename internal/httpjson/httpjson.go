// Package httpjson makes the JSON requests of limitd's own HTTP clients
// (limitd bench, limitd ctl): a JSON body out, a 2xx answer decoded, any
// other answer an *Error carrying the server's problem detail (RFC 9457).
//
// Layer: it imports wire only.
package httpjson

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/limitd/limitd/wire"
)

// Error is an answer that is not 2xx.
type Error struct {
	Method, Path string
	Status       int    // the HTTP status
	Detail       string // the problem's detail, else its title, else the body
	Problem      wire.Problem
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), e.Detail)
}

// Do makes one request, with body as JSON when it is not nil and token as a
// bearer token when it is not empty, and decodes a 2xx answer into out
// (nil: none expected, as for 204). It returns the status.
func Do(ctx context.Context, hc *http.Client, method, url, token string, body []byte, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
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
	defer Drain(resp.Body)
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, ProblemOf(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: reading the answer: %w", method, req.URL.Path, err)
	}
	return resp.StatusCode, nil
}

// Drain reads what is left of a body, so that its connection is reused, and closes it.
func Drain(rc io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(rc, 64<<10))
	rc.Close()
}

// ProblemOf is the *Error of a non-2xx answer: its status and the problem's
// detail (RFC 9457), or its title, or the body.
func ProblemOf(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	e := &Error{Method: resp.Request.Method, Path: resp.Request.URL.Path, Status: resp.StatusCode}
	_ = json.Unmarshal(data, &e.Problem)
	e.Detail = cmp.Or(e.Problem.Detail, e.Problem.Title, strings.TrimSpace(string(data)))
	return e
}

package grpcapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limitd/limitd/core"
)

// POST /json answers as ShouldRateLimit does, in protobuf's JSON: 200
// within the limit, 429 over it, 400 for a body that is no request, 401
// without the token.
func TestJSONHandler(t *testing.T) {
	e := newEnv(t, perUser, strict, func(o *Options, _ *core.Options) { o.Token = "tok" })
	h := e.srv.JSONHandler()
	post := func(body, auth string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	call := `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`
	if code, body := post(call, "Bearer tok"); code != http.StatusOK || !strings.Contains(body, `"overallCode":"OK"`) {
		t.Errorf("first call: %d %s, want 200 and OK", code, body)
	}
	if code, body := post(call, "Bearer tok"); code != http.StatusTooManyRequests || !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) {
		t.Errorf("second call at once: %d %s, want 429 and OVER_LIMIT", code, body)
	}
	if code, body := post(`{"domain":`, "Bearer tok"); code != http.StatusBadRequest || !strings.Contains(body, "not a RateLimitRequest") {
		t.Errorf("truncated body: %d %s, want 400 naming a RateLimitRequest", code, body)
	}
	if code, body := post(call, ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d %s, want 401", code, body)
	}
	if code, body := post(call, "Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d %s, want 401", code, body)
	}
}

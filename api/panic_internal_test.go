package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/testkit/storetest"
	"github.com/limitd/limitd/wire"
)

// A panic in a handler becomes a logged problem+json 500, never a dropped
// connection.
func TestPanicRecovered(t *testing.T) {
	_, _, st := storetest.Mini(t)
	var logs bytes.Buffer
	h := New(Options{Service: core.New(st, core.Options{}), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		AccessLog: AccessLogErrors})
	h.e.GET("/boom", func(echo.Context) error { panic("boom") })

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/boom", nil))
	var p problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != http.StatusInternalServerError ||
		rec.Header().Get("Content-Type") != "application/problem+json" || p.Status != 500 || p.Type != wire.ProblemType(wire.ProblemInternal) {
		t.Errorf("got %d %s %q (%v)", rec.Code, rec.Header().Get("Content-Type"), rec.Body, err)
	}
	if l := logs.String(); !strings.Contains(l, "panic serving request") || !strings.Contains(l, "boom") || !strings.Contains(l, "status=500") {
		t.Errorf("log:\n%s", l)
	}
}

func TestOpenapiPath(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/limiters/:name/acquire": "/v1/limiters/{name}/acquire",
		"/v1/templates":              "/v1/templates",
		"/v1/templates/:id":          "/v1/templates/{id}",
	} {
		if got := openapiPath(in); got != want {
			t.Errorf("openapiPath(%q) = %q, want %q", in, got, want)
		}
	}
}

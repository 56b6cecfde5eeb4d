package api_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/api"
)

type logLine struct {
	Msg, Op, Limiter, Template, By, Addr, Problem string
	VersionBefore                                 *int64 `json:"version_before"`
	VersionAfter                                  *int64 `json:"version_after"`
	More                                          *int   `json:"more_since_last_logged"`
}

func logLines(t *testing.T, buf *bytes.Buffer, msg string) []logLine {
	t.Helper()
	var out []logLine
	for line := range strings.Lines(buf.String()) {
		var l logLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		if l.Msg == msg {
			out = append(out, l)
		}
	}
	return out
}

// Every config change is an audit line at info, with the access log off:
// what, the versions before and after, who (the token kind) and from
// where; a PUT that changes nothing is none.
func TestAuditLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	e := newEnv(t, func(o *api.Options) { o.Logger, o.AdminToken = log, "adm" })
	auth := []string{"Authorization", "Bearer adm"}
	e.must(201, "PUT", "/v1/limiters/a", `{"rate":5}`, auth...)
	e.must(200, "PUT", "/v1/limiters/a", `{"rate":5}`, auth...) // the same: no change
	e.must(200, "PATCH", "/v1/limiters/a", `{"rate":6}`, auth...)
	e.must(200, "POST", "/v1/limiters/a/reset", nil, auth...)
	e.must(200, "POST", "/v1/limiters/a/acquire", nil) // not a change
	e.must(204, "DELETE", "/v1/limiters/a", nil, auth...)
	e.must(201, "PUT", "/v1/templates/t", `{"pattern":"u:*","limiter":{"rate":1}}`, auth...)
	e.must(200, "PUT", "/v1/templates/t", `{"pattern":"u:*","limiter":{"rate":1}}`, auth...)
	e.must(200, "PUT", "/v1/templates/t", `{"pattern":"u:*","limiter":{"rate":2}}`, auth...)
	e.must(204, "DELETE", "/v1/templates/t", nil, auth...)
	got := logLines(t, &buf, "config change")
	type want struct {
		op, limiter, template string
		before, after         int64 // -1: not shown
	}
	wants := []want{
		{"put", "a", "", 0, 1}, {"patch", "a", "", 1, 2}, {"reset", "a", "", 2, 2}, {"delete", "a", "", -1, -1},
		{"put", "", "t", 0, 1}, {"put", "", "t", 1, 2}, {"delete", "", "t", -1, -1},
	}
	if len(got) != len(wants) {
		t.Fatalf("%d audit lines, want %d:\n%s", len(got), len(wants), buf.String())
	}
	for i, w := range wants {
		g := got[i]
		versions := g.VersionBefore == nil && g.VersionAfter == nil && w.before < 0 ||
			g.VersionBefore != nil && g.VersionAfter != nil && *g.VersionBefore == w.before && *g.VersionAfter == w.after
		if g.Op != w.op || g.Limiter != w.limiter || g.Template != w.template || !versions || g.By != "admin-token" || g.Addr == "" {
			t.Errorf("audit line %d: %+v, want %+v by admin-token", i, g, w)
		}
	}
	if n := len(logLines(t, &buf, "http request")); n != 0 {
		t.Errorf("%d access log lines with the access log off", n)
	}
}

// A Redis outage fails every request alike: the first is logged, the
// rest of the run only as a count on the next line a while later.
func TestFailuresSummarised(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	e := newEnvRedis(t, func(ro *redis.Options) { ro.MaxRetries, ro.DialerRetries = -1, 1 },
		func(o *api.Options) { o.Logger = log })
	e.must(201, "PUT", "/v1/limiters/r", `{"rate":100}`)
	e.m.Close()
	for range 20 {
		e.must(503, "POST", "/v1/limiters/r/acquire", nil)
	}
	got := logLines(t, &buf, "request failed")
	if len(got) != 1 || got[0].Problem != "unavailable" || got[0].More == nil || *got[0].More != 0 {
		t.Errorf("20 failures in a row logged as %+v, want one line", got)
	}
}

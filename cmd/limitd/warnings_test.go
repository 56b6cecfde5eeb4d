package main

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/testkit/logtest"
)

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "abc", 3}, {"kitten", "sitting", 3},
		{"LIMITD_ADMIN_TOKN", "LIMITD_ADMIN_TOKEN", 1}, {"LIMITD_ADRD", "LIMITD_ADDR", 2}, {"flaw", "lawn", 2},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := editDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

// Each unknown LIMITD_ variable is warned about once, by name, with the
// closest known one when one is close; known ones and other variables are
// not.
func TestWarnUnknownVars(t *testing.T) {
	logs := &logtest.Buffer{}
	warnUnknownVars(slog.New(slog.NewTextHandler(logs, nil)), map[string]string{
		"LIMITD_ADMIN_TOKN":  "x",
		"LIMITD_REDIS_URI":   "redis://r:6379",
		"LIMITD_COMPLETELY":  "1",
		"LIMITD_ADDR":        "127.0.0.1:0",
		"LIMITD_URL":         "http://127.0.0.1:8080",
		"HOME":               "/root",
		"LIMITD_GRPC_ADDR":   "",
		"LIMITD_TOKEN":       "t",
		"NOT_LIMITD_ADDRESS": "x",
	})
	out := logs.String()
	for _, want := range []string{
		"LIMITD_ADMIN_TOKN is not a variable limitd reads; did you mean LIMITD_ADMIN_TOKEN?",
		"LIMITD_REDIS_URI is not a variable limitd reads; did you mean LIMITD_REDIS_URL?",
		"LIMITD_COMPLETELY is not a variable limitd reads (see limitd help serve)",
	} {
		if strings.Count(out, want) != 1 {
			t.Errorf("want once %q in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "level=WARN"); n != 3 {
		t.Errorf("%d warnings, want 3 (the unknown variables only):\n%s", n, out)
	}
}

// limitd serve warns about a misspelt variable, and, with an admin token but
// no LIMITD_TOKEN on an address beyond loopback, that acquires are open to
// anyone who reaches it; its start line names the dashboard's URL, and GET /
// leads there.
func TestServeStartWarnings(t *testing.T) {
	base, logs, stop := startServe(t, map[string]string{
		"LIMITD_ADDR":        "0.0.0.0:0",
		"LIMITD_ADMIN_TOKEN": "secret",
		"LIMITD_ADMIN_TOKN":  "secret",
	})
	base = strings.Replace(base, "0.0.0.0", "127.0.0.1", 1)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /: %d to %q, want 302 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{
		"LIMITD_ADMIN_TOKN is not a variable limitd reads; did you mean LIMITD_ADMIN_TOKEN?",
		"LIMITD_ADDR listens beyond loopback without LIMITD_TOKEN: anyone who reaches it can acquire permits",
		"dashboard=http://localhost:",
	} {
		if strings.Count(out, want) != 1 {
			t.Errorf("want once %q in:\n%s", want, out)
		}
	}
}

// On loopback, or with LIMITD_TOKEN, acquires are not open to others: no
// warning.
func TestServeNoOpenAcquireWarning(t *testing.T) {
	for _, env := range []map[string]string{
		{"LIMITD_ADMIN_TOKEN": "secret"},
		{"LIMITD_ADDR": "0.0.0.0:0", "LIMITD_ADMIN_TOKEN": "secret", "LIMITD_TOKEN": "reader"},
	} {
		_, logs, stop := startServe(t, env)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if out := logs.String(); strings.Contains(out, "without LIMITD_TOKEN") || strings.Contains(out, "is not a variable") {
			t.Errorf("%v: unexpected warning:\n%s", env, out)
		}
	}
}

func TestDashboardURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080/ui/",
		"0.0.0.0:8080":   "http://localhost:8080/ui/",
		"[::]:9000":      "http://localhost:9000/ui/",
		"[::1]:9000":     "http://[::1]:9000/ui/",
		":8080":          "http://localhost:8080/ui/",
	} {
		if got := dashboardURL(addr); got != want {
			t.Errorf("dashboardURL(%q) = %q, want %q", addr, got, want)
		}
	}
}

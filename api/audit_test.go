package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/internal/testkit/metricstest"
	"github.com/limitd/limitd/store"
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
	start := time.Now()
	for range 20 {
		e.must(503, "POST", "/v1/limiters/r/acquire", nil)
	}
	// One line per 10 s window of the run: one, unless the machine took
	// longer than that for 20 requests (TestFailureLog drives the window).
	most := 1 + int(time.Since(start)/(10*time.Second))
	got := logLines(t, &buf, "request failed")
	if len(got) < 1 || len(got) > most || got[0].Problem != "unavailable" || got[0].More == nil || *got[0].More != 0 {
		t.Errorf("20 failures in a row logged as %+v, want %d line(s) at most", got, most)
	}
}

// /metrics counts permits (an acquire of 3 counts 3), times grants' delays
// and lateness, and says which limitd serves.
func TestPermitMetrics(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.Version = "v9.9.9" })
	e.must(201, "PUT", "/v1/limiters/m", `{"rate":10,"burst":1}`)
	e.must(200, "POST", "/v1/limiters/m/acquire", `{"permits":3}`)                   // now: delay 0
	e.must(200, "POST", "/v1/limiters/m/acquire", `{"permits":2}`)                   // after the 3: 300 ms
	e.must(429, "POST", "/v1/limiters/m/acquire", `{"permits":5,"max_wait":"10ms"}`) // 500 ms away: refused
	m := string(e.must(200, "GET", "/metrics", nil).body)
	for _, want := range []string{
		`limitd_permits_total{decision="granted",limiter="m",template=""} 5`,
		`limitd_permits_total{decision="denied",limiter="m",template=""} 5`,
		`limitd_acquire_decisions_total{decision="granted",limiter="m",template=""} 2`,
		`limitd_acquire_delay_seconds_count{limiter="m",template=""} 2`,
		`limitd_acquire_delay_seconds_sum{limiter="m",template=""} 0.3`,
		`limitd_acquire_delay_seconds_bucket{limiter="m",template="",le="0"} 1`,
		`limitd_acquire_lateness_seconds_count{limiter="m",template=""} 2`,
		`limitd_build_info{goversion="go`, `version="v9.9.9"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// The metrics table of docs/operations.md names every limitd_ metric /metrics serves,
// with its type, and no other but the gRPC front end's (grpcapi's
// TestMetricsTableInREADME checks them).
func TestMetricsTableInREADME(t *testing.T) {
	served := servedMetrics(t)
	if len(served) < 14 {
		t.Fatalf("%d metrics served: the activity above should make all 14", len(served))
	}
	metricstest.CheckTable(t, "/metrics", served, func(name string) bool { return !grpcMetric(name) })
}

// grpcMetric reports whether a metric is the gRPC front end's, which the
// HTTP API's /metrics serves only when limitd serve runs both.
func grpcMetric(name string) bool {
	return strings.HasPrefix(name, "limitd_grpc_") || strings.HasPrefix(name, "limitd_ratelimit_")
}

// servedMetrics is every limitd_ metric family /metrics serves, and its
// type, after activity of every kind (so that every vector has a series).
func servedMetrics(t *testing.T) map[string]string {
	t.Helper()
	return metricTypes(scrapeAfterActivity(t))
}

// metricTypes are the limitd_ metric families of a scrape, and their types.
func metricTypes(scrape string) map[string]string {
	served := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (limitd_[a-z_]+) ([a-z]+)$`).FindAllStringSubmatch(scrape, -1) {
		served[m[1]] = m[2]
	}
	return served
}

// metricLabels are the label names of each limitd_ metric family of a
// scrape (a histogram's le included).
func metricLabels(scrape string) map[string]map[string]bool {
	types := metricTypes(scrape)
	labels := map[string]map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^(limitd_[a-z_]+)\{([^}]*)\}`).FindAllStringSubmatch(scrape, -1) {
		name := queriedMetrics(m[1], types)[0]
		if labels[name] == nil {
			labels[name] = map[string]bool{}
		}
		for _, l := range regexp.MustCompile(`([a-z_]+)="`).FindAllStringSubmatch(m[2], -1) {
			labels[name][l[1]] = true
		}
	}
	return labels
}

// scrapeAfterActivity is what /metrics serves after activity of every
// kind, a sampler round and a flush of the busiest instances.
func scrapeAfterActivity(t *testing.T) string {
	t.Helper()
	s := newSampled(t) // the sampler's gauges need a round
	e := s.env
	e.must(201, "PUT", "/v1/limiters/r", `{"rate":10}`)
	e.must(200, "POST", "/v1/limiters/r/acquire", nil)
	e.must(201, "PUT", "/v1/limiters/s", `{"kind":"share","capacity":10}`)
	e.ask("s", "a", 1, 0)
	e.must(201, "PUT", "/v1/limiters/c", `{"kind":"concurrency","limit":1}`)
	e.must(201, "PUT", "/v1/limiters/w", `{"kind":"window","limit":1,"period":"1s"}`)
	l := e.slot(200, "c", nil)
	e.must(204, "POST", "/v1/limiters/c/release", lease(l.LeaseID))
	e.must(404, "GET", "/v1/limiters/none", nil)
	e.must(201, "PUT", "/v1/templates/per-user", `{"pattern":"user:*","limiter":{"rate":5}}`)
	e.must(200, "POST", "/v1/limiters/user:1/acquire", nil)
	// the busiest instances, as a ledger's flush adds them
	if err := e.st.AddTotals(context.Background(), store.TotalsBatch{Top: []store.TopAdd{{Template: "per-user",
		Minute: t0.Unix() / 60, Granted: map[string]int64{"user:1": 1}}}}); err != nil {
		t.Fatal(err)
	}
	e.must(201, "PUT", "/v1/limiters/sh", `{"rate":1,"shadow":true}`)
	s.round(time.Second)
	s.round(time.Second) // rates need two reads
	return string(e.must(200, "GET", "/metrics", nil).body)
}

// queriedMetrics are the limitd_ metrics an expression queries, a
// histogram's _bucket, _sum and _count series under its own name.
func queriedMetrics(expr string, served map[string]string) []string {
	var out []string
	for _, n := range regexp.MustCompile(`limitd_[a-z_]+`).FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && served[base] == "histogram" {
				n = base
			}
		}
		out = append(out, n)
	}
	return out
}

// Every query of the Grafana dashboard in deploy/ is of metrics /metrics
// serves, and it has panels for every kind of limiter, templates and Redis.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("../deploy/grafana/limitd-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	served := servedMetrics(t)
	queried := map[string]bool{}
	queries := 0
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			names := queriedMetrics(q.Expr, served)
			if len(names) == 0 {
				t.Errorf("panel %q queries no limitd metric: %s", p.Title, q.Expr)
			}
			checkServed(t, served, fmt.Sprintf("panel %q", p.Title), names)
			for _, n := range names {
				queried[n] = true
			}
		}
	}
	if queries < 10 {
		t.Errorf("%d queries in the dashboard", queries)
	}
	for kind, names := range map[string][]string{
		"rate":        {"limitd_acquire_decisions_total", "limitd_limiter_utilization", "limitd_limiter_wait_seconds", "limitd_limiter_granted_per_second", "limitd_limiter_refused_per_second", "limitd_limiter_shadow_refused_per_second"},
		"window":      {"limitd_window_remaining"},
		"share":       {"limitd_share_held", "limitd_share_capacity"},
		"concurrency": {"limitd_slots_in_use", "limitd_slots_limit"},
		"template":    {"limitd_template_instances", "limitd_template_top_permits"},
		"redis":       {"limitd_errors_total", "limitd_redis_call_duration_seconds", "limitd_redis_data_lost_total"},
	} {
		for _, n := range names {
			if !queried[n] {
				t.Errorf("no panel of the dashboard shows %s (%s)", n, kind)
			}
		}
	}
}

// checkServed reports every metric of names that /metrics does not serve.
func checkServed(t *testing.T, served map[string]string, where string, names []string) {
	t.Helper()
	for _, n := range names {
		if served[n] == "" {
			t.Errorf("%s uses %s, which /metrics does not serve", where, n)
		}
	}
}

// Every metric the alert rules in deploy/ use, and every series their unit
// tests feed them, is one /metrics serves, the series with labels it has
// (besides the scrape's job and instance) (cmd/limitd's
// TestDeployAlertRulesPromtool runs promtool on both files).
func TestAlertRules(t *testing.T) {
	scrape := scrapeAfterActivity(t)
	served, labels := metricTypes(scrape), metricLabels(scrape)
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	readYAML(t, "../deploy/prometheus/limitd-alerts.yml", &rules)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			names := queriedMetrics(r.Expr, served)
			if len(names) == 0 && !strings.HasPrefix(r.Expr, "up{") {
				t.Errorf("%s queries no limitd metric: %s", r.Alert, r.Expr)
			}
			checkServed(t, served, "alert "+r.Alert, names)
		}
	}
	if n < 6 {
		t.Fatalf("%d alerts found", n)
	}
	var tests struct {
		Tests []struct {
			Name   string
			Series []struct{ Series string } `yaml:"input_series"`
		}
	}
	readYAML(t, "../deploy/prometheus/limitd-alerts.test.yml", &tests)
	for _, tc := range tests.Tests {
		for _, s := range tc.Series {
			names := queriedMetrics(s.Series, served)
			checkServed(t, served, "the alert test "+tc.Name, names)
			if len(names) != 1 {
				continue // up{…}
			}
			_, ls, _ := strings.Cut(s.Series, "{")
			for _, l := range regexp.MustCompile(`([a-z_]+)="`).FindAllStringSubmatch(ls, -1) {
				if l[1] != "job" && l[1] != "instance" && !labels[names[0]][l[1]] {
					t.Errorf("the alert test %s: %s has a label %s, which /metrics does not give it", tc.Name, s.Series, l[1])
				}
			}
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// The state gauges are the sampler's reading of Redis, whoever took the
// permits: here the store directly, as a client pool in another process
// does, never this API.
func TestStateGaugesFromRedis(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/b", `{"rate":10,"burst":1}`)
	e.must(201, "PUT", "/v1/limiters/q", `{"kind":"share","capacity":10,"learning":"0s"}`)
	e.must(201, "PUT", "/v1/limiters/sem", `{"kind":"concurrency","limit":3}`)
	e.must(201, "PUT", "/v1/limiters/w", `{"kind":"window","limit":5,"period":"1h"}`)
	if _, err := e.st.Acquire(context.Background(), "w", 2, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Acquire(context.Background(), "b", 1, 0); err != nil { // 100 ms of schedule, at t0
		t.Fatal(err)
	}
	if _, err := e.st.AcquireSlot(context.Background(), "sem"); err != nil {
		t.Fatal(err)
	}
	e.ask("q", "w", 4, 0)
	e.at(3 * time.Second)
	e.sampled1()
	m := string(e.must(200, "GET", "/metrics", nil).body)
	for _, want := range []string{
		`limitd_limiter_backlog_seconds{limiter="b"} 2.9`,
		`limitd_share_held{limiter="q"} 4`,
		`limitd_share_capacity{limiter="q"} 10`,
		`limitd_slots_in_use{limiter="sem"} 1`,
		`limitd_slots_limit{limiter="sem"} 3`,
		`limitd_window_remaining{limiter="w"} 3`,
		`limitd_limiters_scraped 4`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
}

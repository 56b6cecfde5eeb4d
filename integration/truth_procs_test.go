//go:build linux

package integration

// Three OS processes of `limitd bench --mode pool` (the Go client's pools,
// over Redis: no limitd server decides their permits) share one 500/s
// schedule, and one `limitd serve` on the same Redis is asked what happened:
// /v1/history, the limiter's signals and /metrics must show the rate the
// benches took and a saturated limiter, and the shipped LimitdSaturated
// alert must fire on the utilization /metrics served. Every name here starts
// with tp so that other tests of the package cannot clash with it.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/alerttest"
	"github.com/limitd/limitd/internal/redistest"
	"github.com/limitd/limitd/wire"
)

const (
	tpLimiter = "tp-bulk"
	tpRate    = 500.0
	tpBenches = 3
	tpRun     = 25 * time.Second
	// tpSettle is how long after the benches start a sample counts as
	// steady: the utilization spans the last 10 s of samples.
	tpSettle = 12 * time.Second
)

// tpBench is the part of `limitd bench --json`'s summary the test reads.
type tpBench struct {
	Permits int64   `json:"permits"`
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"rate"`
	Errors  int64   `json:"errors"`
}

func TestGoClientProcessesShowInSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: three bench processes for 25 s")
	}
	redis := redistest.Server(t)
	url := "redis://" + redis.Addr()
	p := svServe(t, map[string]string{"LIMITD_REDIS_URL": url})

	start := time.Now()
	var benches []*svProc
	for range tpBenches {
		benches = append(benches, svRun(t, map[string]string{},
			"bench", "--redis", url, "--limiter", tpLimiter,
			"--create", fmt.Sprintf(`{"kind":"schedule","rate":%v}`, tpRate),
			"--mode", "pool", "--duration", tpRun.String(), "--json"))
	}

	// Steady: the history holds samples from tpSettle after the start up to
	// 22 s in, all while the benches still run.
	steadyFrom, upTo := start.Add(tpSettle).UnixNano(), start.Add(22*time.Second).UnixNano()
	var h wire.History
	svEventually(t, 40*time.Second, func() string {
		for _, b := range benches {
			select {
			case <-b.done:
				return "" // read what there is; the checks below say what is missing
			default:
			}
		}
		code, body := p.do("GET", "/v1/history?limiters="+tpLimiter, "", "")
		if code != 200 {
			return fmt.Sprintf("/v1/history = %d %s", code, body)
		}
		h = wire.History{}
		if err := json.Unmarshal(body, &h); err != nil {
			return err.Error()
		}
		s := h.Limiters[tpLimiter]
		if len(s) == 0 || s[len(s)-1].T < upTo {
			return fmt.Sprintf("%d samples of %s, none yet 22 s after the benches started", len(s), tpLimiter)
		}
		return ""
	})

	// What the limiter's page (fed by its event stream) and /metrics read,
	// while the benches run.
	sig := tpStateSignals(t, p, tpLimiter)
	code, metrics := p.do("GET", "/metrics", "", "")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	gauge := func(name string) float64 {
		m := regexp.MustCompile(`(?m)^` + name + `\{limiter="` + tpLimiter + `"\} ([0-9.e+-]+)$`).FindSubmatch(metrics)
		if m == nil {
			t.Fatalf("/metrics serves no %s of %s", name, tpLimiter)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	metricGranted, metricUse := gauge("limitd_limiter_granted_per_second"), gauge("limitd_limiter_utilization")

	// What the benches say they took, together.
	var took float64
	for i, b := range benches {
		if code := b.wait(30 * time.Second); code != 0 {
			t.Fatalf("bench %d exited %d:\n%s", i, code, b.stderr)
		}
		out := b.stderr.String()
		var r tpBench
		if j := strings.LastIndex(out, "\n{"); j >= 0 {
			out = out[j+1:]
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil || r.Permits == 0 {
			t.Fatalf("bench %d's summary %q: %v", i, out, err)
		}
		t.Logf("bench %d: %d permits in %.2f s, %.1f/s, %d errors", i, r.Permits, r.Seconds, r.Rate, r.Errors)
		took += r.Rate
	}
	if took < tpRate*0.95 || took > tpRate*1.05 {
		t.Fatalf("the benches took %.1f/s of a %v/s limiter together; want all of it (± 5 %%)", took, tpRate)
	}
	lo, hi := took*0.95, min(took*1.05, tpRate*1.05)
	in := func(g float64) bool { return g >= lo && g <= hi }

	n := 0
	var sum float64
	for _, s := range h.Limiters[tpLimiter] {
		if s.T < steadyFrom {
			continue
		}
		n++
		sum += s.GrantedPerS
		if !in(s.GrantedPerS) || s.Utilization < 0.95 {
			t.Errorf("/v1/history at %v after the start: %.1f/s at %.3f; want %.1f to %.1f/s, utilization ≥ 0.95",
				time.Duration(s.T-start.UnixNano()).Round(time.Millisecond), s.GrantedPerS, s.Utilization, lo, hi)
		}
	}
	if n < 6 {
		t.Errorf("%d steady samples in /v1/history, want one a second from %v to 22 s", n, tpSettle)
	}
	if s := sig; !in(s.GrantedPerS) || s.Utilization < 0.95 || s.Health != "saturated" {
		t.Errorf("the limiter's signals: %.1f/s at %.3f, health %q; want %.1f to %.1f/s, utilization ≥ 0.95, saturated",
			s.GrantedPerS, s.Utilization, s.Health, lo, hi)
	}
	if !in(metricGranted) || metricUse < 0.95 {
		t.Errorf("/metrics: granted %.1f/s, utilization %v; want %.1f to %.1f/s, ≥ 0.95", metricGranted, metricUse, lo, hi)
	}
	if n > 0 {
		t.Logf("%d bench processes took %.1f/s of %v/s: /v1/history %.1f/s on average over %d steady samples, its event stream's signals %.1f/s at %.3f, /metrics %.1f/s at %v",
			tpBenches, took, tpRate, sum/float64(n), n, sig.GrantedPerS, sig.Utilization, metricGranted, metricUse)
	}
	alerttest.SaturatedFires(t, "../deploy/prometheus/limitd-alerts.yml", tpLimiter, metricUse)
}

// tpStateSignals reads name's first "state" event with signals from
// GET /v1/events, what the dashboard's limiter page shows.
func tpStateSignals(t *testing.T, p *svProc, name string) *wire.Signals {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", p.base+"/v1/events?limiters="+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/events: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/events = %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case event == "state" && strings.HasPrefix(line, "data: "):
			var ev wire.LimiterEvent
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("a state event %q: %v", line, err)
			}
			if ev.Name == name && ev.Signals != nil {
				return ev.Signals
			}
		}
	}
	t.Fatalf("no state event of %s with signals within 10 s: %v", name, sc.Err())
	return nil
}

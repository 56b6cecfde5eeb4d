//go:build linux

package integration

// Three OS processes of `limitd bench --mode pool` (the Go client's pools,
// over Redis: no limitd server decides their permits) share one 500/s
// schedule, and one `limitd serve` on the same Redis is asked what happened:
// /v1/history, the limiter's signals (its event stream), its dashboard page
// in Chromium and /metrics must show the rate the benches took and a
// saturated limiter, and the shipped LimitdSaturated
// alert must fire on the utilization /metrics served. Every name here starts
// with tp so that other tests of the package cannot clash with it.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/limitd/limitd/internal/testkit/alerttest"
	"github.com/limitd/limitd/internal/testkit/browsertest"
	"github.com/limitd/limitd/internal/testkit/redistest"
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
	// The browser starts first: its start-up on a busy machine must not
	// push the page's reading past the benches' end.
	browser, noBrowser := tpBrowser(t)

	start := time.Now()
	var benches []*svProc
	for range tpBenches {
		benches = append(benches, svRun(t, map[string]string{},
			"bench", "--redis", url, "--limiter", tpLimiter,
			// No backlog: time a stalled process left unclaimed is forfeited,
			// not caught up at burst × rate, so that no span of the flow
			// is granted more than the rate.
			"--create", fmt.Sprintf(`{"kind":"schedule","rate":%v,"max_backlog":"0s"}`, tpRate),
			"--mode", "pool", "--duration", tpRun.String(), "--json"))
	}

	// Steady: the history holds samples from tpSettle after the start up to
	// 20 s in, and every reading below is taken while the benches still run.
	steadyFrom, upTo := start.Add(tpSettle).UnixNano(), start.Add(20*time.Second).UnixNano()
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
			return fmt.Sprintf("%d samples of %s, none yet 20 s after the benches started", len(s), tpLimiter)
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
	var pageGranted, pageUse float64
	page := t.Run("Page", func(t *testing.T) {
		if noBrowser != "" {
			redistest.Missing(t, noBrowser)
		}
		pageGranted, pageUse = tpPage(t, browser, p.base, tpLimiter)
	})

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
	// A reading spans 5 s (core.RateSpan): on a busy machine the benches
	// may stall within one and forfeit permits (no backlog), which their
	// average over the whole run hardly shows, so one reading may fall
	// 10 % short of it; none may exceed the rate, as an aliased chart did
	// (1.4–3×). The steady readings' average must match the benches' ± 5 %.
	lo, hi := took*0.90, min(took*1.05, tpRate*1.05)
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
		t.Errorf("%d steady samples in /v1/history, want one a second from %v to 20 s", n, tpSettle)
	} else if avg := sum / float64(n); avg < took*0.95 || avg > took*1.05 {
		t.Errorf("/v1/history's steady samples average %.1f/s; the benches took %.1f/s (want ± 5 %%)", avg, took)
	}
	if s := sig; !in(s.GrantedPerS) || s.Utilization < 0.95 || s.Health != "saturated" {
		t.Errorf("the limiter's signals: %.1f/s at %.3f, health %q; want %.1f to %.1f/s, utilization ≥ 0.95, saturated",
			s.GrantedPerS, s.Utilization, s.Health, lo, hi)
	}
	if !in(metricGranted) || metricUse < 0.95 {
		t.Errorf("/metrics: granted %.1f/s, utilization %v; want %.1f to %.1f/s, ≥ 0.95", metricGranted, metricUse, lo, hi)
	}
	if page && (!in(pageGranted) || pageUse < 95) {
		t.Errorf("the limiter's page: %v/s granted at %v %%; want %.1f to %.1f/s, ≥ 95 %%", pageGranted, pageUse, lo, hi)
	}
	if n > 0 {
		t.Logf("%d bench processes took %.1f/s of %v/s: /v1/history %.1f/s on average over %d steady samples, its event stream's signals %.1f/s at %.3f, /metrics %.1f/s at %v, the page %v/s at %v %%; %v from the benches' start",
			tpBenches, took, tpRate, sum/float64(n), n, sig.GrantedPerS, sig.Utilization, metricGranted, metricUse, pageGranted, pageUse, time.Since(start).Round(time.Millisecond))
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

// tpBrowser starts a headless Chromium (Debian's chromium), stopped when the
// test ends, or says why there is none.
func tpBrowser(t *testing.T) (context.Context, string) {
	bin := browsertest.Chromium()
	if bin == "" {
		return nil, "chromium not installed: apt-get install -y chromium to check the dashboard's limiter page"
	}
	return browsertest.Start(t, bin), ""
}

// tpPage opens name's page of the dashboard in the browser, waits until it
// shows a rate, saves a screenshot to $LIMITD_SCREENSHOTS (else the test's
// temporary folder) and returns the granted rate and the utilization (in %)
// it shows.
func tpPage(t *testing.T, browser context.Context, base, name string) (granted, util float64) {
	ctx, cancel := chromedp.NewContext(browser)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 30*time.Second)
	defer cancelT()
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/#/limiter/"+name)); err != nil {
		t.Fatalf("open %s's page: %v", name, err)
	}
	shown, err := chromedp.Run(ctx, chromedp.Poll[[]string](`(() => {
		const g = document.querySelector("#v-granted b"), u = document.querySelector("#v-util b");
		return !!g && !!u && /\/s$/.test(g.textContent) && /%$/.test(u.textContent) && [g.textContent, u.textContent]; })()`,
		chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s's page shows no rate and utilization: %v; it shows:\n%s", name, err, body)
	}
	// The all-time count is Redis', every caller's: no "0 granted" beside a
	// flow of Go clients.
	total, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const p = document.querySelector("#v-permits b"), t = document.querySelector("#v-total-granted");
		return t ? "front ends' count shown: " + t.textContent : p ? p.textContent : "none"; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(strings.ReplaceAll(strings.Fields(total + " x")[0], ",", "")); n <= 0 {
		t.Errorf("%s's page shows granted, all time %q, want the permits Redis recorded (> 0)", name, total)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := cmp.Or(os.Getenv("LIMITD_SCREENSHOTS"), t.TempDir())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "limitd-go-client-processes-limiter.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("the page shows granted %q, utilization %q; screenshot: %s", shown[0], shown[1], path)
	m := regexp.MustCompile(`([0-9.]+)(k?)/s$`).FindStringSubmatch(shown[0])
	if m == nil {
		t.Fatalf("%q is no rate", shown[0])
	}
	granted, _ = strconv.ParseFloat(m[1], 64)
	if m[2] == "k" {
		granted *= 1000
	}
	util, err = strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(shown[1], "%")), 64)
	if err != nil {
		t.Fatalf("%q is no percentage", shown[1])
	}
	return granted, util
}

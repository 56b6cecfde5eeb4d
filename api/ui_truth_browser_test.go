package api_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/internal/testkit/alerttest"
	"github.com/limitd/limitd/store"
	"github.com/limitd/limitd/wire"
)

// rateOf reads a rate the page shows ("498.0/s") as a number.
func rateOf(t *testing.T, s string) float64 {
	t.Helper()
	m := regexp.MustCompile(`([0-9.]+)(k?)/s`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%q shows no rate", s)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	if m[2] == "k" {
		v *= 1000
	}
	return v
}

// pctOf reads a percentage the page shows ("99 %").
func pctOf(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(s, "%")), 64)
	if err != nil {
		t.Fatalf("%q shows no percentage", s)
	}
	return v
}

// What the page, the history and /metrics say is what Redis decided,
// whoever decided it: the paths the operator could not see before.
func TestDashboardTruthInBrowser(t *testing.T) {
	b := newBrowser(t)

	// Three Go clients over Redis (their pools take permits from the
	// schedule in Redis, no limitd server decides them) take 498/s of a
	// 500/s limiter: the overview, its page and /v1/history show it, and
	// LimitdSaturated fires on the utilization /metrics serves.
	t.Run("GoClients", func(t *testing.T) {
		e := newDashboardEnv(t)
		e.must(201, "PUT", "/v1/limiters/bulk", `{"rate":500,"burst":1.1}`)
		// Three clients, each its own connection to Redis and its own
		// store, as three processes' pools are: no limitd counts them.
		var clients []*store.Store
		for range 3 {
			rdb := redis.NewClient(&redis.Options{Addr: e.m.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			clients = append(clients, store.New(rdb))
		}
		traffic(t, e, func(step int) {
			for _, c := range clients { // 166 permits a second each, in 100 ms steps
				n := int64(166*step/10 - 166*(step-1)/10)
				if _, err := c.Acquire(context.Background(), "bulk", n, time.Hour); err != nil {
					t.Error(err)
				}
			}
		})
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		p := b.open(t, srv.URL+"/ui/")
		// 12 s: the utilization spans 10 s of samples.
		p.eventually("bulk's row at its rate for 12 s", `(() => { const l = limiters.get("bulk");
			return !!l && l.hist.filter(x => x.granted != null).length >= 12; })()`)
		g, u := rateOf(t, p.text(`tr[data-name="bulk"] .granted`)), pctOf(t, p.text(`tr[data-name="bulk"] .pct`))
		if g < 498*0.95 || g > 498*1.05 || u < 95 {
			t.Errorf("the overview says bulk grants %v/s at %v %%; want 498 ± 5 %%/s, ≥ 95 %%", g, u)
		}
		if h := p.text(`tr[data-name="bulk"] .health`); h != "saturated" {
			t.Errorf("bulk's health %q, want saturated", h)
		}
		p.save("limitd-go-clients-overview.png")
		p.do("open bulk", `document.querySelector('tr[data-name="bulk"]').click()`)
		p.eventually("bulk's page", `!!document.querySelector("#v-granted b") && /\/s$/.test(document.querySelector("#v-granted b").textContent)`)
		if g := rateOf(t, p.text("#v-granted b")); g < 498*0.95 || g > 498*1.05 {
			t.Errorf("bulk's page says %v/s granted; want 498 ± 5 %%", g)
		}
		if u := pctOf(t, p.text("#v-util b")); u < 95 {
			t.Errorf("bulk's page says utilization %v %%; want ≥ 95 %%", u)
		}
		p.save("limitd-go-clients-limiter.png")

		var h wire.History
		e.must(200, "GET", "/v1/history?limiters=bulk", nil).decode(t, &h)
		last := h.Limiters["bulk"][len(h.Limiters["bulk"])-1]
		if last.GrantedPerS < 498*0.95 || last.GrantedPerS > 498*1.05 || last.Utilization < 0.95 {
			t.Errorf("/v1/history's last sample %+v; want 498 ± 5 %%/s, utilization ≥ 0.95", last)
		}
		m := regexp.MustCompile(`(?m)^limitd_limiter_utilization\{limiter="bulk"\} ([0-9.e+-]+)$`).FindStringSubmatch(string(e.must(200, "GET", "/metrics", nil).body))
		if m == nil {
			t.Fatal("/metrics serves no utilization of bulk")
		}
		use, _ := strconv.ParseFloat(m[1], 64)
		t.Logf("Go clients at 498/s of 500/s: the page %.1f/s, history %.1f/s at %.3f, /metrics utilization %v", g, last.GrantedPerS, last.Utilization, use)
		alerttest.SaturatedFires(t, "../deploy/prometheus/limitd-alerts.yml", "bulk", use)
	})

	// A steady 20/s limiter whose samples land 0 to 2.6 s apart (a busy
	// process, the clock driven): every point of its chart is 20 ± 1/s.
	t.Run("SteadyChart", func(t *testing.T) {
		e := newEnv(t)
		tick := make(chan time.Time)
		e.sample(tick)
		h := e.h.(*api.Handler)
		e.must(201, "PUT", "/v1/limiters/steady", `{"rate":20}`)
		round := func() {
			n := api.SignalRounds(h)
			tick <- time.Time{}
			for deadline := time.Now().Add(pageWait); api.SignalRounds(h) == n; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the sampler took no round")
				}
			}
		}
		round()
		gaps := []int{0, 26, 3, 14, 20, 1, 9, 26, 0, 12, 5, 22, 17, 8, 26, 2, 11, 19, 6, 24} // ×100 ms
		var at time.Duration
		for i := range 90 {
			for range gaps[i%len(gaps)] {
				at += 100 * time.Millisecond
				e.at(at)
				if _, err := e.st.Acquire(context.Background(), "steady", 2, time.Hour); err != nil { // 20/s
					t.Fatal(err)
				}
			}
			round()
		}
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		p := b.open(t, srv.URL+"/ui/#/limiter/steady")
		p.eventually("the chart drawn with the history", `!!document.querySelector("#c-rates") && document.querySelector("#c-rates").dataset.history === "loaded"`)
		var pts []struct {
			T       int64    `json:"t"`
			Granted *float64 `json:"granted"`
		}
		p.eval("the chart's points", `limiters.get("steady").hist`, &pts)
		start := t0.UnixNano()
		n := 0
		for _, pt := range pts {
			if pt.Granted == nil || pt.T-start <= int64(5*time.Second) {
				continue // the first 5 s: a rate spans what there is
			}
			n++
			if *pt.Granted < 19 || *pt.Granted > 21 {
				t.Errorf("a chart point at %v: %.2f/s, want 20 ± 1/s", time.Duration(pt.T-start), *pt.Granted)
			}
		}
		if n < 60 {
			t.Errorf("%d chart points, want the 85 after the first 5 s", n)
		}
		p.save("limitd-steady-chart.png")
	})

	// A shadow limiter over its rate: marked, "would refuse N/s", never red.
	t.Run("Shadow", func(t *testing.T) {
		e := newDashboardEnv(t)
		e.must(201, "PUT", "/v1/limiters/trial", `{"rate":5,"burst":1,"shadow":true}`)
		traffic(t, e, func(int) { e.send(true, "POST", "/v1/limiters/trial/acquire", `{"permits":1,"max_wait":"0s"}`) }) // 10/s of 5/s
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		p := b.open(t, srv.URL+"/ui/")
		p.eventually("trial would refuse", `(() => { const r = document.querySelector('tr[data-name="trial"]');
			return !!r && /^shadow: would refuse [1-9][0-9.]*\/s$/.test(r.querySelector(".health").textContent); })()`)
		var row struct {
			Problem bool
			Refused string
		}
		p.eval("trial's row", `(() => { const r = document.querySelector('tr[data-name="trial"]');
			return {Problem: r.classList.contains("problem"), Refused: r.querySelector(".refused").textContent}; })()`, &row)
		if row.Problem || !strings.HasPrefix(row.Refused, "none (would ") {
			t.Errorf("a shadow limiter's row %+v; want no alarm, nobody refused", row)
		}
		p.save("limitd-shadow-overview.png")
		p.do("open trial", `document.querySelector('tr[data-name="trial"]').click()`)
		p.eventually("trial's page", `!!document.querySelector("#v-health b") && document.querySelector("#v-health b").textContent.startsWith("shadow: would refuse")`)
		var health struct{ Text, Color string }
		p.eval("the health", `({Text: document.querySelector("#v-health b").textContent, Color: getComputedStyle(document.querySelector("#v-health b")).color})`, &health)
		if health.Color != "rgb(29, 35, 39)" {
			t.Errorf("a shadow limiter's health %+v, want the text's colour, not red", health)
		}
		p.save("limitd-shadow-limiter.png")
	})

	// A template instance refused 60 % of the time: its page says so from
	// its template's counts, never "ok".
	t.Run("Instance", func(t *testing.T) {
		e := newDashboardEnv(t)
		e.must(201, "PUT", "/v1/templates/users", `{"pattern":"user:*","limiter":{"rate":2,"burst":1}}`)
		traffic(t, e, func(step int) {
			if step%2 == 0 { // 5 a second of 2/s: 60 % refused
				e.send(true, "POST", "/v1/limiters/user:1/acquire", `{"permits":1,"max_wait":"0s"}`)
			}
		})
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		p := b.open(t, srv.URL+"/ui/#/limiter/user:1")
		p.eventually("the instance refusing", `!!document.querySelector("#v-health b") && /^refusing [0-9]+ %$/.test(document.querySelector("#v-health b").textContent)`)
		pct := pctOf(t, strings.TrimPrefix(p.text("#v-health b"), "refusing "))
		if pct < 50 || pct > 70 {
			t.Errorf("user:1's page says refusing %v %%; want about 60 %%", pct)
		}
		if c := p.text("#v-instance b"); !strings.Contains(c, "refused") {
			t.Errorf("user:1's counts under its template: %q", c)
		}
		if r := p.text("#v-refused b"); !strings.HasSuffix(r, "in the last minutes") || strings.HasPrefix(r, "0") {
			t.Errorf("user:1's refused: %q, want its count under its template, never 0/s", r)
		}
		p.save("limitd-instance-refused.png")
	})

	// A concurrency limiter at its limit: in use, free, and the next lease
	// expiry named as such; no wait for a new caller is claimed.
	t.Run("ConcurrencyFull", func(t *testing.T) {
		e := newDashboardEnv(t)
		e.must(201, "PUT", "/v1/limiters/exports", `{"kind":"concurrency","limit":3,"lease":"30s"}`)
		for range 3 {
			e.slot(200, "exports", nil)
		}
		traffic(t, e, nil)
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		p := b.open(t, srv.URL+"/ui/")
		p.eventually("exports full", `(() => { const r = document.querySelector('tr[data-name="exports"]');
			return !!r && r.querySelector(".granted").textContent === "3 of 3 in use, 0 free"; })()`)
		if w := p.text(`tr[data-name="exports"] .wait`); w != "–" {
			t.Errorf("a full concurrency limiter's wait for a new caller: %q, want none claimed", w)
		}
		p.do("open exports", `document.querySelector('tr[data-name="exports"]').click()`)
		p.eventually("exports' page", `!!document.querySelector("#v-expiry b")`)
		if u, f, x := p.text("#v-inuse b"), p.text("#v-free b"), p.text("#v-expiry"); u != "3 of 3" || f != "0" || !strings.HasPrefix(x, "next lease expiry") ||
			!strings.Contains(x, "a slot frees sooner when released") {
			t.Errorf("exports' page: in use %q, free %q, %q", u, f, x)
		}
		var waitShown bool
		p.eval("the wait chart", `!!document.querySelector("#v-wait") || !document.querySelector("#wait-card").hidden`, &waitShown)
		if waitShown {
			t.Error("exports' page claims a wait for a new caller")
		}
		p.save("limitd-concurrency-full.png")
	})
}

package api_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/testkit/browsertest"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/wire"
)

// chromium returns the path of a Chromium (Debian's chromium) or skips the
// test; with redistest.RequireEnv set (CI) a missing browser fails it.
func chromium(t *testing.T) string {
	if testing.Short() {
		// CI's race run is -short: a browser's seconds there would test
		// the page's script, not Go's races; the full run has them.
		t.Skip("browser tests run without -short")
	}
	if p := browsertest.Chromium(); p != "" {
		return p
	}
	redistest.Missing(t, "chromium not installed: apt-get install -y chromium to run the dashboard's browser test")
	return ""
}

// pageWait bounds every wait for the page to show something: generous, for
// a busy machine; a wait polls the page, it never asserts a duration.
const pageWait = 20 * time.Second

// browser is one headless Chromium that every case of the test opens its
// tabs in; shots is where their screenshots go.
type browser struct {
	ctx   context.Context
	shots string
}

func newBrowser(t *testing.T) *browser {
	ctx := browsertest.Start(t, chromium(t))
	shots := cmp.Or(os.Getenv("LIMITD_SCREENSHOTS"), t.TempDir())
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	return &browser{ctx: ctx, shots: shots}
}

// tab is one page of the dashboard in the browser.
type tab struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

// open opens url in a new tab, closed when the test ends.
func (b *browser) open(t *testing.T, url string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	ctx, cancelT := context.WithTimeout(ctx, 2*pageWait)
	t.Cleanup(func() { cancelT(); cancel() })
	p := &tab{t: t, ctx: ctx, shots: b.shots}
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return p
}

// eval runs a script in the page and decodes its value into out.
func (p *tab) eval(what, script string, out any) {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[json.RawMessage](script))
	if err == nil {
		err = json.Unmarshal(v, out)
	}
	if err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// do runs a script in the page for its effects.
func (p *tab) do(what, script string) {
	p.t.Helper()
	var ignored any
	p.eval(what, "(() => { "+script+"; return true; })()", &ignored)
}

// text is the text of the first element matching a CSS selector ("" when
// there is none).
func (p *tab) text(sel string) string {
	p.t.Helper()
	var s string
	p.eval("the text of "+sel, fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.textContent : ""; })()`, sel), &s)
	return s
}

// eventually polls a script in the page until it returns true.
func (p *tab) eventually(what, script string) {
	p.t.Helper()
	for deadline := time.Now().Add(pageWait); ; {
		var ok bool
		p.eval(what, script, &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var body string
			p.eval("the page", `document.body.innerText`, &body)
			p.t.Fatalf("%s: not within %v; the page shows:\n%s", what, pageWait, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// save writes a screenshot of the whole page to the screenshot folder.
func (p *tab) save(name string) {
	p.t.Helper()
	p.do("settle", "")                                             // one round trip, so that the last frame is drawn
	shot, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		p.t.Fatal(err)
	}
	path := filepath.Join(p.shots, name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s", path)
}

// traffic moves the Redis clock with the wall clock, in steps of 100 ms,
// and calls each step's work at the step's start, until the test ends.
func traffic(t *testing.T, e *env, work func(step int)) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			e.at(time.Duration(i) * 100 * time.Millisecond)
			if work != nil {
				work(i)
			}
			// Samples read Redis between the steps' work, not at its
			// instant: a caller's own pacing is over by then.
			e.at(time.Duration(i)*100*time.Millisecond + 50*time.Millisecond)
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// newDashboardEnv is newEnv as limitd serve runs it: a ledger adds the
// decisions to Redis totals each second (its minute buckets on the Redis
// clock's first minute, where the tests' traffic stays), and the handler
// samples every named limiter (signals, history, status), until the test
// ends.
func newDashboardEnv(t *testing.T, opts ...func(*api.Options)) *env {
	e, _ := newDashboardService(t, opts...)
	return e
}

// newDashboardService is newDashboardEnv with its service.
func newDashboardService(t *testing.T, opts ...func(*api.Options)) (*env, *core.Service) {
	e := newEnv(t, opts...)
	led := core.NewLedger(e.st, core.LedgerOptions{Clock: func() time.Time { return t0 }})
	e.reg = prometheus.NewRegistry()
	svc := core.New(e.st, core.Options{Ledger: led})
	o := api.Options{Service: svc, Registry: e.reg}
	for _, f := range opts {
		f(&o)
	}
	h := api.New(o)
	e.h = h
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { led.Run(ctx) })
	wg.Go(func() { h.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return e, svc
}

// The dashboard in a real browser (headless Chromium), each case over its
// own limitd (the API handler on miniredis): what an on-call engineer asks
// first (what is refused, who, why) and whether the page tells the truth.
// Screenshots go to $LIMITD_SCREENSHOTS (default: a temporary folder).
func TestDashboardInBrowser(t *testing.T) {
	b := newBrowser(t)

	// The overview under mixed traffic: a limiter used below its rate shows
	// no alarm whatever its backlog; one that refuses callers does, with
	// why. A semaphore and a share show what is held.
	t.Run("Overview", func(t *testing.T) {
		e := newDashboardEnv(t)
		e.must(201, "PUT", "/v1/limiters/steady", `{"rate":100,"burst":1.1}`)
		e.must(201, "PUT", "/v1/limiters/quota", `{"kind":"window","limit":5,"period":"1h"}`)
		e.must(201, "PUT", "/v1/limiters/exports", `{"kind":"concurrency","limit":4}`)
		e.must(201, "PUT", "/v1/limiters/partner", `{"kind":"share","capacity":10,"learning":"0s"}`)
		e.slot(200, "exports", nil)
		e.ask("partner", "worker-1", 4, 0)
		traffic(t, e, func(int) {
			e.send(true, "POST", "/v1/limiters/steady/acquire", `{"permits":2}`) // 20/s of 100/s
			e.send(true, "POST", "/v1/limiters/quota/acquire", `{"permits":1}`)  // refused after 5
		})
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		p := b.open(t, srv.URL+"/ui/")
		p.eventually("four limiter rows", `document.querySelectorAll("tr.row").length === 4`)
		p.eventually("quota shown refusing, first", `(() => { const r = document.querySelector('tr[data-name="quota"]');
			return r.classList.contains("problem") && r.querySelector(".health").textContent === "refusing" &&
				/^[1-9][0-9.]*\/s$/.test(r.querySelector(".refused").textContent) && document.querySelector("tr.row") === r; })()`)
		p.eventually("steady granting", `/^[1-9][0-9.]*\/s$/.test(document.querySelector('tr[data-name="steady"] .granted').textContent)`)
		var steady struct {
			Problem bool
			Health  string
			Util    string
		}
		p.eval("the steady row", `(() => { const r = document.querySelector('tr[data-name="steady"]');
			return {Problem: r.classList.contains("problem"), Health: r.querySelector(".health").textContent, Util: r.querySelector(".pct").textContent}; })()`, &steady)
		if steady.Problem || steady.Health != "ok" {
			t.Errorf("steady, used at a fifth of its rate, shows %+v; want no alarm", steady)
		}
		if g := p.text(`tr[data-name="exports"] .granted`); g != "1 of 4 in use, 3 free" {
			t.Errorf("the semaphore's row says %q", g)
		}
		if g := p.text(`tr[data-name="partner"] .granted`); g != "4 of 10 held, 4 wanted" {
			t.Errorf("the share's row says %q", g)
		}
		if s := p.text("#status"); s != "live" {
			t.Errorf("status %q, want live", s)
		}
		// The page's kinds and versions are the API's.
		var list wire.LimiterList
		e.must(200, "GET", "/v1/limiters", nil).decode(t, &list)
		for _, l := range list.Limiters {
			sel := fmt.Sprintf(`tr[data-name=%q]`, l.Name)
			if k, v := p.text(sel+" .kind"), p.text(sel+" .ver"); k != string(l.Config.Kind) || v != fmt.Sprint(l.Version) {
				t.Errorf("the API has %s (%s, version %d); the page shows %s, version %s", l.Name, l.Config.Kind, l.Version, k, v)
			}
		}
		p.eventually("steady's sparkline", `Number(document.querySelector('tr[data-name="steady"] canvas').dataset.points) >= 3`)
		p.save("limitd-overview.png")
	})

	// A template's page: its config and live instances, and the instances
	// that were refused most, each a link to its own page.
	t.Run("Template", func(t *testing.T) {
		e := newDashboardEnv(t)
		e.must(201, "PUT", "/v1/templates/users", `{"pattern":"user:*","limiter":{"kind":"window","limit":3,"period":"1h"}}`)
		for name, n := range map[string]int{"user:1": 10, "user:2": 5, "user:3": 2} {
			for range n {
				e.send(true, "POST", "/v1/limiters/"+name+"/acquire", `{"permits":1}`)
			}
		}
		traffic(t, e, nil)
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		p := b.open(t, srv.URL+"/ui/")
		p.eventually("the template listed with its instances", `(() => { const r = document.querySelector('tr.tpl[data-id="users"]');
			return !!r && r.querySelector(".instances").textContent === "3"; })()`)
		p.do("open the template", `document.querySelector('tr.tpl[data-id="users"] a').click()`)
		p.eventually("the top refused instances", `document.querySelectorAll("#top-refused tr.inst").length === 2`)
		var refused [][]string
		p.eval("the refused list", `[...document.querySelectorAll("#top-refused tr.inst")].map(r => [r.dataset.name, r.querySelector(".refused").textContent, r.querySelector(".granted").textContent])`, &refused)
		if want := [][]string{{"user:1", "7", "3"}, {"user:2", "2", "3"}}; fmt.Sprint(refused) != fmt.Sprint(want) {
			t.Errorf("top refused: %q, want %q", refused, want)
		}
		p.eventually("the top granted instances", `document.querySelectorAll("#top-granted tr.inst").length === 3`)
		if n := p.text("#tpl-instances b"); n != "3" {
			t.Errorf("live instances: %q, want 3", n)
		}
		p.save("limitd-template.png")
		p.do("open user:1", `document.querySelector('#top-refused tr[data-name="user:1"] a').click()`)
		p.eventually("the instance's page", `(() => { const r = document.querySelector("#v-remaining b");
			return !!r && r.textContent === "0 of 3" && !!document.querySelector("#tpl-link"); })()`)
		if l := p.text("#tpl-link"); l != "users" {
			t.Errorf("the instance's template link says %q", l)
		}
		p.save("limitd-instance.png")
	})

	// A window limiter's page: what is left and when it resets; an edit
	// that the page refuses (nothing is sent), one that the API refuses
	// (its reason shown at the field), one applied; then a refill, asked
	// for and confirmed.
	t.Run("Window", func(t *testing.T) {
		e := newDashboardEnv(t, func(o *api.Options) { o.AdminToken = "adm" })
		e.must(201, "PUT", "/v1/limiters/daily", `{"kind":"window","limit":100,"period":"1m"}`)
		for range 3 {
			e.must(200, "POST", "/v1/limiters/daily/acquire", `{"permits":1}`)
		}
		traffic(t, e, nil)
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		p := b.open(t, srv.URL+"/ui/#/limiter/daily")
		p.do("type the token", `const i = document.querySelector("#token"); i.value = "adm"; i.dispatchEvent(new Event("change"))`)
		p.eventually("remaining and reset", `(() => { const r = document.querySelector("#v-remaining b"), s = document.querySelector("#v-reset b");
			return !!r && r.textContent === "97 of 100" && / UTC \(in [0-9]+ s\)$/.test(s.textContent); })()`)
		for f, want := range map[string]string{"limit": "100", "period": "1m0s", "zone": ""} {
			var v string
			p.eval("field "+f, `document.querySelector("#f-`+f+`").value`, &v)
			if v != want {
				t.Errorf("field %s shows %q, want %q", f, v, want)
			}
		}
		if r := p.text("#reset"); !strings.Contains(r, "Refill the quota now") {
			t.Errorf("the reset button says %q", r)
		}
		version := func() int64 {
			var l wire.Limiter
			e.must(200, "GET", "/v1/limiters/daily", nil).decode(t, &l)
			return l.Version
		}

		// Bad input: told at the field, nothing sent.
		p.do("a bad limit", `document.querySelector("#f-limit").value = "abc"; document.querySelector("#apply").click()`)
		p.eventually("the field's error", `document.querySelector("#e-limit").textContent.startsWith("limit: a whole number")`)
		if m := p.text("#msg"); !strings.HasPrefix(m, "Not sent") {
			t.Errorf("message %q after bad input", m)
		}
		if v := version(); v != 1 {
			t.Errorf("bad input in the page reached the API: version %d", v)
		}
		p.save("limitd-window-bad-input.png")

		// The API's refusal, at its field.
		p.do("a period too long", `document.querySelector("#f-limit").value = "100"; document.querySelector("#f-period").value = "100000h"; document.querySelector("#apply").click()`)
		p.eventually("the API's reason", `document.querySelector("#msg").textContent.startsWith("Refused by limitd: period:") &&
			document.querySelector("#e-period").textContent.includes("8784h")`)

		// Good input: applied, and the page shows it.
		p.do("a daily quota", `document.querySelector("#f-limit").value = "50"; document.querySelector("#f-period").value = "day";
			document.querySelector("#f-zone").value = "Europe/Paris"; document.querySelector("#apply").click()`)
		p.eventually("applied", `document.querySelector("#msg").textContent.startsWith("Applied:")`)
		var l wire.Limiter
		e.must(200, "GET", "/v1/limiters/daily", nil).decode(t, &l)
		if l.Config.Limit == nil || *l.Config.Limit != 50 || l.Config.Period != "day" || l.Config.Zone != "Europe/Paris" || l.Version != 2 {
			t.Errorf("after the page's change the API has %+v, version %d", l.Config, l.Version)
		}
		p.eventually("the new config on the page", `document.querySelector("#cfg").textContent.includes("limit 50") &&
			document.querySelector("#v-remaining b").textContent === "47 of 50"`)
		if m := p.text("#msg"); !strings.HasPrefix(m, "Applied:") {
			t.Errorf("the success message went: %q", m)
		}
		p.save("limitd-window-applied.png")

		// Refill: asked first, then done.
		p.do("reset", `document.querySelector("#reset").click()`)
		if c := p.text("#confirm"); !strings.Contains(c, "Refill the quota of daily now?") {
			t.Errorf("the confirmation says %q", c)
		}
		p.do("confirm", `document.querySelector("#confirm-yes").click()`)
		p.eventually("refilled", `document.querySelector("#msg").textContent === "Done: quota refilled." &&
			document.querySelector("#v-remaining b").textContent === "50 of 50"`)
	})

	// A page opened after the traffic shows the limiter's history at once:
	// its chart holds the samples taken before it opened.
	t.Run("History", func(t *testing.T) {
		// 90 s of traffic on Redis' clock, each second flushed by the
		// ledger and sampled, before any page opens.
		e := newEnv(t)
		led := core.NewLedger(e.st, core.LedgerOptions{Clock: func() time.Time { return t0 }})
		h := api.New(api.Options{Service: core.New(e.st, core.Options{Ledger: led}), Registry: prometheus.NewRegistry()})
		e.h = h
		tick := make(chan time.Time)
		api.SetSignalTicker(h, tick)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { h.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		e.must(201, "PUT", "/v1/limiters/orders", `{"rate":100,"burst":1.1}`)
		const seconds = 90
		for i := 1; i <= seconds; i++ {
			for j := range 10 { // 50 permits a second, half the rate, spread over the second
				e.at(time.Duration(i-1)*time.Second + time.Duration(j)*100*time.Millisecond)
				e.send(true, "POST", "/v1/limiters/orders/acquire", `{"permits":5}`)
			}
			e.at(time.Duration(i)*time.Second - 50*time.Millisecond)
			if err := led.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			n := api.SignalRounds(h)
			tick <- time.Time{}
			for deadline := time.Now().Add(pageWait); api.SignalRounds(h) == n; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the sampler took no round")
				}
			}
		}
		var hist struct {
			Limiters map[string][]json.RawMessage `json:"limiters"`
		}
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/history?limiters=orders", nil))
		if err := json.Unmarshal(rec.Body.Bytes(), &hist); rec.Code != 200 || err != nil {
			t.Fatalf("GET /v1/history: %d %s", rec.Code, rec.Body)
		}
		before := len(hist.Limiters["orders"]) // samples of orders in its history
		if before < seconds {
			t.Fatalf("GET /v1/history has %d samples of orders, want the %d rounds", before, seconds)
		}
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		p := b.open(t, srv.URL+"/ui/#/limiter/orders")
		p.eventually("the chart drawn with the history", `!!document.querySelector("#c-rates") && document.querySelector("#c-rates").dataset.history === "loaded"`)
		var points int
		p.eval("the chart's points", `Number(document.querySelector("#c-rates").dataset.points)`, &points)
		if points < before {
			t.Errorf("the chart has %d points at once; the history had %d", points, before)
		}
		if g := p.text("#v-granted b"); !strings.HasSuffix(g, "/s") || g == "–" {
			t.Errorf("granted: %q", g)
		}
		// Used at half its rate, orders has a backlog (time nobody
		// claimed): shown, and not a problem.
		var backlog struct{ Health, Backlog, Color string }
		p.eval("the backlog", `({Health: document.querySelector("#v-health b").textContent, Backlog: document.querySelector("#v-backlog b").textContent,
			Color: getComputedStyle(document.querySelector("#v-backlog b")).color})`, &backlog)
		if backlog.Health != "ok" || !regexp.MustCompile(`^[1-9][0-9.]* m?s$`).MatchString(backlog.Backlog) || backlog.Color != "rgb(29, 35, 39)" {
			t.Errorf("orders at half its rate: %+v; want health ok, a backlog in the text's colour", backlog)
		}
		p.save("limitd-history.png")

		// A schedule's form: a burst of "abc" is refused in the page,
		// nothing sent; a new rate and burst are applied.
		p.do("a bad burst", `document.querySelector("#f-burst").value = "abc"; document.querySelector("#apply").click()`)
		p.eventually("the burst's error", `document.querySelector("#e-burst").textContent === "burst: a number ≥ 1 and ≤ 1e6, or inf"`)
		var l wire.Limiter
		if e.must(200, "GET", "/v1/limiters/orders", nil).decode(t, &l); l.Version != 1 {
			t.Errorf("a bad burst reached the API: version %d", l.Version)
		}
		p.do("a new rate", `document.querySelector("#f-rate").value = "250"; document.querySelector("#f-burst").value = "inf"; document.querySelector("#apply").click()`)
		p.eventually("applied", `document.querySelector("#msg").textContent.startsWith("Applied: rate 250, burst inf")`)
		if e.must(200, "GET", "/v1/limiters/orders", nil).decode(t, &l); l.Config.Rate != 250 || l.Config.Burst == nil || l.Config.Burst.String() != "inf" || l.Version != 2 {
			t.Errorf("after the page's change the API has %+v, version %d", l.Config, l.Version)
		}
		p.eventually("the new config on the page", `document.querySelector("#cfg").textContent === "rate 250, burst inf" && document.querySelector("#e-burst").textContent === ""`)
	})

	// An empty server: connected, and says there is no limiter yet.
	t.Run("Empty", func(t *testing.T) {
		e := newDashboardEnv(t)
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		p := b.open(t, srv.URL+"/ui/")
		p.eventually("no limiters yet", `document.querySelector("#status").textContent === "live" &&
			!document.querySelector("#none").hidden && document.querySelector("#none").textContent.startsWith("No limiters yet")`)
		p.eventually("no templates", `!!document.querySelector("#no-templates")`)
		if p.text("#redis-down") != "" {
			t.Error("an empty server is shown as Redis unavailable")
		}
		p.save("limitd-empty.png")
	})

	// Redis found to have lost limitd's data: a banner says when.
	t.Run("DataLost", func(t *testing.T) {
		e, svc := newDashboardService(t)
		e.must(201, "PUT", "/v1/limiters/orders", `{"rate":100}`)
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		p := b.open(t, srv.URL+"/ui/")
		p.eventually("the limiter's row", `document.querySelectorAll("tr.row").length === 1`)
		if p.text("#data-lost") != "" {
			t.Error("a data-loss banner before any loss")
		}
		svc.DataLost(t0.Add(time.Second).UnixNano())
		p.eventually("the data-loss banner", `(() => { const b = document.querySelector("#data-lost");
			return !!b && /^Redis lost limitd's data at (2025-06-15 )?15:06:41 UTC/.test(b.textContent); })()`)
		p.save("limitd-data-lost.png")
	})

	// Redis going away: the page says so, on a page that was open and on
	// one opened after, and never that there is no limiter.
	t.Run("RedisDown", func(t *testing.T) {
		e := newDashboardEnv(t)
		e.must(201, "PUT", "/v1/limiters/orders", `{"rate":100}`)
		srv := httptest.NewServer(e.h)
		t.Cleanup(srv.Close)
		p := b.open(t, srv.URL+"/ui/")
		p.eventually("the limiter's row", `document.querySelectorAll("tr.row").length === 1`)
		e.m.Close()
		p.eventually("Redis unavailable", `document.querySelector("#status").textContent === "Redis unavailable" && !!document.querySelector("#redis-down")`)
		if h := p.text(`tr[data-name="orders"] .health`); h != "unknown" {
			t.Errorf("with Redis down the limiter's health reads %q", h)
		}
		p.save("limitd-redis-down.png")
		p.do("reload", `location.reload()`)
		p.eventually("Redis unavailable after a reload", `!!document.querySelector("#redis-down") && document.querySelector("#none") && !document.querySelector("#none").hidden`)
		if n := p.text("#none"); strings.Contains(n, "No limiters yet") || !strings.Contains(n, "Redis unavailable") {
			t.Errorf("with Redis down the overview says %q", n)
		}
		p.save("limitd-redis-down-reloaded.png")
	})
}

// The dashboard page is served without a token, with a content policy that
// lets it talk to this server only; /ui redirects to it.
func TestDashboardPage(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.Token, o.AdminToken = "tok", "adm" })
	e.token = ""
	r := e.must(200, "GET", "/ui/", nil)
	if ct := r.header.Get("Content-Type"); ct != "text/html; charset=utf-8" || !bytes.Contains(r.body, []byte(`fetch("/v1/events`)) ||
		!strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("GET /ui/: %s %v", ct, r.header)
	}
	if r := e.must(200, "HEAD", "/ui/", nil); r.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("HEAD /ui/: %v", r.header)
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui", nil))
	if rec.Code != 301 || rec.Header().Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d %v", rec.Code, rec.Header())
	}
}

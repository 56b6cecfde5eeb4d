package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/limitd/limitd/wire"
)

// attackPage is a page of another origin that tries, through the browser
// that shows it, to spend the permits of limitd's limiter x and reset it:
// requests a page may send without asking the server first (no-cors POSTs
// with a text, a typeless, a form or no body). Its title says when every
// request has settled, and how many the browser sent and failed.
const attackPage = `<!doctype html><title>loading</title><script>
(async () => {
  const target = %q;
  const bodies = [() => '{"permits":1}', () => new Blob(['{"permits":1}']), () => undefined, () => new URLSearchParams("permits=1")];
  let sent = 0, failed = 0;
  const all = [];
  for (let i = 0; i < %d; i++) {
    all.push(fetch(target + "/v1/limiters/x/acquire", {method: "POST", mode: "no-cors", body: bodies[i %% 4]()}).then(() => sent++, () => failed++));
  }
  for (let i = 0; i < %d; i++) {
    all.push(fetch(target + "/v1/limiters/x/reset", {method: "POST", mode: "no-cors"}).then(() => sent++, () => failed++));
  }
  await Promise.all(all);
  document.title = "done " + sent + " " + failed;
})();
</script>`

// requests is limitd_http_requests_total of POST route with status.
func (e *env) requests(route string, status int) float64 {
	e.t.Helper()
	fams, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "limitd_http_requests_total" {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			want := map[string]string{"method": "POST", "route": route, "status": fmt.Sprint(status)}
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// A limitd without tokens, in a real browser (headless Chromium): pages of
// another site (localhost against 127.0.0.1) and of the same site on
// another port each send 200 acquires and 20 resets to limiter x the way a
// page can without asking; every one reaches limitd and is refused (403),
// and x's state in Redis is untouched. The dashboard, served by limitd
// itself, still acquires, resets and reconfigures.
func TestCrossOriginWritesInBrowser(t *testing.T) {
	bin := chromium(t)
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/x", `{"rate":1,"burst":1}`)
	limitd := httptest.NewServer(e.h)
	t.Cleanup(limitd.Close)
	const acquires, resets = 200, 20
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, attackPage, limitd.URL, acquires, resets)
	}))
	t.Cleanup(page.Close)
	// The same page under another site's name: localhost is not 127.0.0.1's site.
	crossSite := strings.Replace(page.URL, "127.0.0.1", "localhost", 1)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()
	eval := func(what, script string, out any) {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](script, chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
		if err == nil {
			err = json.Unmarshal(v, out)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// until polls a script in the page until it returns true.
	until := func(what, script string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var ok bool
			eval(what, script, &ok)
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s", what)
			}
		}
	}

	before := e.dump()
	const acquireRoute, resetRoute = "/v1/limiters/{name}/acquire", "/v1/limiters/{name}/reset"
	for i, origin := range []string{crossSite, page.URL} {
		if err := chromedp.Do(ctx, chromedp.Navigate(origin+"/")); err != nil {
			t.Fatalf("open %s: %v", origin, err)
		}
		until("the page's requests settle", `document.title.startsWith("done")`)
		var title string
		eval("the title", `document.title`, &title)
		if want := fmt.Sprintf("done %d 0", acquires+resets); title != want {
			t.Errorf("%s: the page says %q, want %q (every request sent)", origin, title, want)
		}
		n := float64(i + 1)
		if got := e.requests(acquireRoute, 403); got != n*acquires {
			t.Errorf("after %s: %v acquires refused with 403, want %v", origin, got, n*acquires)
		}
		if got := e.requests(resetRoute, 403); got != n*resets {
			t.Errorf("after %s: %v resets refused with 403, want %v", origin, got, n*resets)
		}
	}
	if got := e.requests(acquireRoute, 200) + e.requests(resetRoute, 200); got != 0 {
		t.Errorf("%v writes from other origins answered 200", got)
	}
	if after := e.dump(); after != before {
		t.Errorf("pages of other origins changed limiter x:\n%s\nthen\n%s", before, after)
	}

	// The dashboard, same origin: an acquire from its page, and its own
	// controls.
	if err := chromedp.Do(ctx, chromedp.Navigate(limitd.URL+"/ui/#/limiter/x")); err != nil {
		t.Fatal(err)
	}
	var status int
	eval("acquire from the dashboard's page", `fetch("/v1/limiters/x/acquire", {method: "POST",
		headers: {"Content-Type": "application/json"}, body: '{"permits":5}'}).then(r => r.status)`, &status)
	if status != 200 {
		t.Errorf("acquire from the dashboard's page: %d, want 200", status)
	}
	until("the limiter's page", `!!document.querySelector("#reset") && !!document.querySelector("#f-rate")`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#reset")), chromedp.Click(chromedp.CSS("#confirm-yes"))); err != nil {
		t.Fatal(err)
	}
	until("the reset done", `document.querySelector("#msg").textContent === "Done: schedule restarted."`)
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#f-rate"), "7"), chromedp.Click(chromedp.CSS("#apply"))); err != nil {
		t.Fatal(err)
	}
	until("the change applied", `document.querySelector("#msg").textContent.startsWith("Applied: rate 7")`)
	var l wire.Limiter
	e.must(200, "GET", "/v1/limiters/x", nil).decode(t, &l)
	if l.Config.Rate != 7 || l.Version != 2 || l.State == nil || l.State.Permits != 5 {
		t.Errorf("after the dashboard's acquire, reset and change: %+v, want rate 7, version 2, 5 permits", l)
	}
	if got := e.requests(resetRoute, 200); got != 1 {
		t.Errorf("%v resets from the dashboard answered 200, want 1", got)
	}
}

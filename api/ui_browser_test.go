package api_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/internal/redistest"
	"github.com/limitd/limitd/wire"
)

// chromium returns the path of a Chromium (Debian's chromium) or skips the
// test; with redistest.RequireEnv set (CI) a missing browser fails it.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not installed: apt-get install -y chromium to run the dashboard's browser test"
	if os.Getenv(redistest.RequireEnv) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// The dashboard in a real browser (headless Chromium): it loads, lists the
// limiters the API reports with the same kinds, configs and versions, shows
// a share's holders and a semaphore's slots, updates live as permits are
// taken, and a rate change made in the page reaches Redis. A screenshot is
// left in $LIMITD_SCREENSHOT_DIR (default: the system's temporary folder).
func TestDashboardInBrowser(t *testing.T) {
	bin := chromium(t)
	e := newEnv(t, func(o *api.Options) { o.AdminToken = "adm" })
	e.must(201, "PUT", "/v1/limiters/orders", `{"rate":100,"burst":1.1}`)
	e.must(201, "PUT", "/v1/limiters/exports", `{"kind":"concurrency","limit":4}`)
	e.must(201, "PUT", "/v1/limiters/partner", `{"kind":"share","capacity":10,"learning":"0s"}`)
	e.slot(200, "exports", nil)
	e.ask("partner", "worker-1", 4, 0)
	srv := httptest.NewServer(e.h)
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1366, 800))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(what, script string, out any) {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](script))
		if err == nil {
			err = json.Unmarshal(v, out)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// eventually polls a script in the page until it returns true.
	eventually := func(what, script string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			var ok bool
			eval(what, script, &ok)
			if ok {
				return
			}
			if time.Now().After(deadline) {
				var body string
				eval("the page", `document.querySelector("main").innerText`, &body)
				t.Fatalf("%s: not within 30s; the page shows:\n%s", what, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	js := func(script string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := chromedp.Evaluate[json.RawMessage](script)(ctx, tg)
			return chromedp.Void{}, err
		}
	}

	run("open the dashboard", chromedp.Navigate(srv.URL+"/ui/"),
		js(`(() => { const i = document.querySelector("#token"); i.value = "adm"; i.dispatchEvent(new Event("change")); return true; })()`))
	eventually("three limiter rows", `document.querySelectorAll("tr.row").length === 3`)

	// The rows say what the API says.
	var rows [][]string
	eval("read the rows", `[...document.querySelectorAll("tr.row")].map(r =>
		[r.dataset.name, r.querySelector(".kind").textContent, r.querySelector(".ver").textContent, r.querySelector(".rate").textContent])`, &rows)
	var list wire.LimiterList
	e.must(200, "GET", "/v1/limiters", nil).decode(t, &list)
	for _, l := range list.Limiters {
		i := slices.IndexFunc(rows, func(r []string) bool { return r[0] == l.Name })
		if i < 0 || rows[i][1] != string(l.Config.Kind) || rows[i][2] != fmt.Sprint(l.Version) {
			t.Errorf("the API has %s (%s, version %d); the page shows %q", l.Name, l.Config.Kind, l.Version, rows)
		}
	}
	if i := slices.IndexFunc(rows, func(r []string) bool { return r[0] == "exports" }); i < 0 || rows[i][3] != "1 of 4 in use" {
		t.Errorf("the semaphore's row: %q", rows)
	}
	if i := slices.IndexFunc(rows, func(r []string) bool { return r[0] == "partner" }); i < 0 || rows[i][3] != "4 of 10 held" {
		t.Errorf("the share's row: %q", rows)
	}

	// Live: permits taken through the API (the Redis clock moving with
	// them) show as a granted rate.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			e.at(time.Duration(i) * 50 * time.Millisecond)
			e.send(true, "POST", "/v1/limiters/orders/acquire", `{"permits":5}`)
		}
	}()
	eventually("a granted rate for orders", `(() => { const r = document.querySelector('tr[data-name="orders"] .rate');
		return r && /^[1-9][0-9.]*\/s$/.test(r.textContent); })()`)

	// The limiter's page: its charts, and its rate changed from the page.
	run("open orders", js(`location.hash = "#/limiter/orders"`))
	eventually("the orders page", `!!document.querySelector("#rate") && !!document.querySelector("#c-rate")`)
	run("change the rate", chromedp.SetValue(chromedp.CSS("#rate"), "250"), chromedp.Click(chromedp.CSS("#apply")))
	eventually("the change applied", `document.querySelector("#msg").textContent === "applied"`)
	close(stop)
	<-done
	var l wire.Limiter
	e.must(200, "GET", "/v1/limiters/orders", nil).decode(t, &l)
	if l.Config.Rate != 250 || l.Version != 2 {
		t.Errorf("after the page's change the API has rate %v, version %d; want 250, 2", l.Config.Rate, l.Version)
	}
	eventually("the new version on the page", `document.querySelector("#cfg") && document.querySelector("#cfg").textContent.includes("rate 250")`)
	dir := cmp.Or(os.Getenv("LIMITD_SCREENSHOT_DIR"), os.TempDir())
	save := func(name string) {
		t.Helper()
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}
	save("limitd-dashboard-limiter.png")
	run("open exports", js(`location.hash = "#/limiter/exports"`))
	eventually("the semaphore's slots", `document.querySelectorAll(".slot").length === 4 && document.querySelectorAll(".slot.used").length === 1`)
	run("open partner", js(`location.hash = "#/limiter/partner"`))
	eventually("the share's holders", `(() => { const b = document.querySelector(".bar div"); return !!b && b.textContent === "worker-1 4"; })()`)

	run("back to the overview", js(`location.hash = "#/"`), chromedp.Sleep(1500*time.Millisecond))
	save("limitd-dashboard.png")
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

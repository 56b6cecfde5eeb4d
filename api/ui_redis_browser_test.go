package api_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/internal/redistest"
)

// The dashboard tells how Redis stands, on every page: a Redis that refuses
// limitd's password is named as such, with the variable to fix (never
// "disconnected"), and an embedded Redis is marked as not shared between
// processes. Screenshots go to $LIMITD_SCREENSHOTS.
func TestDashboardRedisInBrowser(t *testing.T) {
	b := newBrowser(t)

	t.Run("WrongPassword", func(t *testing.T) {
		srv := redistest.Server(t)
		if err := srv.Client().Do(t.Context(), "ACL", "SETUSER", "limitd", "on", ">right-pw", "~*", "&*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
		e := newEnvAt(t, srv.Addr(), "limitd", "wrong-pw")
		hs := httptest.NewServer(e.h)
		t.Cleanup(hs.Close)
		for _, page := range []string{"/ui/", "/ui/#/limiter/orders"} {
			p := b.open(t, hs.URL+page)
			p.eventually("the header naming the refused credentials", `document.querySelector("#status").textContent === "Redis refused limitd's credentials"`)
			p.eventually("the banner naming the cause and the fix", `(() => { const b = document.querySelector("#redis-down");
				return !!b && b.textContent.includes("WRONGPASS") && b.textContent.includes("LIMITD_REDIS_URL"); })()`)
			if s := p.text("#status"); strings.Contains(s, "disconnected") {
				t.Errorf("%s: header %q", page, s)
			}
			if strings.Contains(p.text("body"), "wrong-pw") {
				t.Errorf("%s: the page shows the password", page)
			}
			if page == "/ui/" {
				p.save("redis-wrong-password.png")
			}
		}
	})

	t.Run("Embedded", func(t *testing.T) {
		e := newDashboardEnv(t, func(o *api.Options) { o.EmbeddedRedis = true })
		e.must(201, "PUT", "/v1/limiters/orders", `{"rate":10}`)
		hs := httptest.NewServer(e.h)
		t.Cleanup(hs.Close)
		for _, page := range []string{"/ui/", "/ui/#/limiter/orders"} {
			p := b.open(t, hs.URL+page)
			p.eventually("the embedded banner", `(() => { const b = document.querySelector("#redis-embedded");
				return !!b && b.textContent.includes("Embedded Redis: not shared between processes"); })()`)
			if d := p.text("#redis-down"); d != "" {
				t.Errorf("%s: an embedded Redis that serves shown down: %q", page, d)
			}
			if page == "/ui/#/limiter/orders" {
				p.eventually("the limiter's page", `document.body.innerText.includes("orders")`)
				p.save("redis-embedded.png")
			}
		}
	})
}

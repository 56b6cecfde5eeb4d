package api_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/internal/testkit/redistest"
)

// The dashboard tells how Redis stands, on every page: a Redis that refuses
// limitd's password is named as such, with the variable to fix (never
// "disconnected"), and an embedded Redis is marked as not shared between
// processes. Screenshots go to $LIMITD_SCREENSHOTS.
func TestDashboardRedisInBrowser(t *testing.T) {
	b := newBrowser(t)

	t.Run("WrongPassword", func(t *testing.T) {
		srv := redistest.Server(t)
		srv.AddUser("limitd", "right-pw")
		e := newEnvAt(t, srv.UserClient("limitd", "wrong-pw"))
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
		// an Envoy rule's template, named by its descriptors
		e.must(201, "PUT", "/v1/templates/envoy.mongo-cps.caba97696b0e", `{"pattern":"envoy.mongo-cps.caba97696b0e:*","order":1000,
			"limiter":{"kind":"window","limit":500,"period":"1s"},"description":"mongo_cps.database_users"}`)
		hs := httptest.NewServer(e.h)
		t.Cleanup(hs.Close)
		for _, page := range []string{"/ui/", "/ui/#/limiter/orders", "/ui/#/template/envoy.mongo-cps.caba97696b0e"} {
			p := b.open(t, hs.URL+page)
			p.eventually("the embedded banner", `(() => { const b = document.querySelector("#redis-embedded");
				return !!b && b.textContent.includes("Embedded Redis: not shared between processes"); })()`)
			if d := p.text("#redis-down"); d != "" {
				t.Errorf("%s: an embedded Redis that serves shown down: %q", page, d)
			}
			switch page {
			case "/ui/":
				p.eventually("the rule's template listed by its descriptors", `(() => { const a = document.querySelector('tr.tpl[data-id="envoy.mongo-cps.caba97696b0e"] a');
					return !!a && a.textContent === "mongo_cps.database_users"; })()`)
			case "/ui/#/template/envoy.mongo-cps.caba97696b0e":
				p.eventually("the template's page titled by its descriptors", `document.querySelector("#title").textContent === "template mongo_cps.database_users"`)
				p.save("template-described.png")
			}
			if page == "/ui/#/limiter/orders" {
				p.eventually("the limiter's page", `document.body.innerText.includes("orders")`)
				p.save("redis-embedded.png")
			}
		}
	})
}

package api_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/wire"
)

// browserCase is one request of the table of TestBrowserGuard: what a
// browser (or another client) sends, and what limitd must answer.
type browserCase struct {
	name   string
	method string
	path   string
	body   string   // "": none
	header []string // name, value pairs; Content-Type is application/json with a body unless set here ("" removes it)
	local  string   // the address the request arrived on; "": none known (not a TCP server)
	host   string   // "": limitd.test
	want   int
	slug   string // the problem's type, for a refusal
	names  string // what the detail must name
}

// serveAt serves one request on e's handler as if it came in on local (an
// IP), and checks the answer against openapi.yaml.
func (e *env) serveAt(c browserCase) *reply {
	e.t.Helper()
	newReq := func() *http.Request {
		var body io.Reader = http.NoBody
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		host := c.host
		if host == "" {
			host = "limitd.test"
		}
		req := httptest.NewRequest(c.method, "http://"+host+c.path, body)
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if e.token != "" {
			req.Header.Set("Authorization", "Bearer "+e.token)
		}
		for i := 0; i+1 < len(c.header); i += 2 {
			if c.header[i+1] == "" {
				req.Header.Del(c.header[i])
			} else {
				req.Header.Set(c.header[i], c.header[i+1])
			}
		}
		if c.local != "" {
			addr := &net.TCPAddr{IP: net.ParseIP(c.local), Port: 8080}
			req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, addr))
		}
		return req
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, newReq())
	r := &reply{code: rec.Code, header: rec.Result().Header, body: rec.Body.Bytes()}
	if r.code >= 400 && r.code != http.StatusTooManyRequests {
		checkProblem(e.t, c.method, c.path, r)
	}
	e.validate(false, newReq(), r)
	return r
}

// Without tokens, limitd refuses what a page on another site can make a
// browser send: a write from another origin (Sec-Fetch-Site, else Origin),
// a write whose body is not declared JSON, and on a loopback address a Host
// that is not a loopback name (DNS rebinding). Clients that are not
// browsers, and the server's own pages, pass; so does everything that needs
// a token when tokens are set. A refused write changes nothing.
func TestBrowserGuard(t *testing.T) {
	const (
		acquire = "/v1/limiters/x/acquire"
		one     = `{"permits":1}`
	)
	crossSite := []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://evil.example"}
	sameSite := []string{"Sec-Fetch-Site", "same-site", "Origin", "http://limitd.test:9999"}
	untokened := []browserCase{
		// Writes: Sec-Fetch-Site first, Origin where a browser sends none.
		{name: "a client that is not a browser", method: "POST", path: acquire, body: one, want: 200},
		{name: "cross-site", method: "POST", path: acquire, body: one, header: crossSite, want: 403, slug: wire.ProblemCrossOrigin, names: `Sec-Fetch-Site "cross-site"`},
		{name: "same-site, another origin", method: "POST", path: acquire, body: one, header: sameSite, want: 403, slug: wire.ProblemCrossOrigin, names: `Sec-Fetch-Site "same-site"`},
		{name: "cross-site without a body", method: "POST", path: "/v1/limiters/x/reset", header: crossSite, want: 403, slug: wire.ProblemCrossOrigin, names: "Sec-Fetch-Site"},
		{name: "cross-site PUT", method: "PUT", path: "/v1/limiters/y", body: `{"rate":1}`, header: crossSite, want: 403, slug: wire.ProblemCrossOrigin, names: "Sec-Fetch-Site"},
		{name: "cross-site PATCH", method: "PATCH", path: "/v1/limiters/x", body: `{"rate":1}`, header: crossSite, want: 403, slug: wire.ProblemCrossOrigin, names: "Sec-Fetch-Site"},
		{name: "cross-site DELETE", method: "DELETE", path: "/v1/limiters/x", header: crossSite, want: 403, slug: wire.ProblemCrossOrigin, names: "Sec-Fetch-Site"},
		{name: "same-origin", method: "POST", path: acquire, body: one, header: []string{"Sec-Fetch-Site", "same-origin", "Origin", "http://limitd.test"}, want: 200},
		{name: "typed by the user", method: "POST", path: acquire, body: one, header: []string{"Sec-Fetch-Site", "none"}, want: 200},
		{name: "old browser, another origin", method: "POST", path: acquire, body: one, header: []string{"Origin", "http://evil.example"}, want: 403, slug: wire.ProblemCrossOrigin, names: `Origin "http://evil.example" is not this server's (Host "limitd.test")`},
		{name: "old browser, opaque origin", method: "POST", path: acquire, body: one, header: []string{"Origin", "null"}, want: 403, slug: wire.ProblemCrossOrigin, names: `Origin "null"`},
		{name: "old browser, its own origin", method: "POST", path: acquire, body: one, header: []string{"Origin", "http://limitd.test"}, want: 200},
		{name: "a read from another site", method: "GET", path: "/v1/limiters/x", header: crossSite, want: 200},
		// Bodies must say they are JSON.
		{name: "a body without a Content-Type", method: "POST", path: acquire, body: one, header: []string{"Content-Type", ""}, want: 415, slug: wire.ProblemUnsupportedMediaType, names: "needs a Content-Type"},
		{name: "a text body", method: "POST", path: acquire, body: one, header: []string{"Content-Type", "text/plain;charset=UTF-8"}, want: 415, slug: wire.ProblemUnsupportedMediaType, names: `"text/plain;charset=UTF-8"`},
		{name: "a form body", method: "POST", path: acquire, body: one, header: []string{"Content-Type", "application/x-www-form-urlencoded"}, want: 415, slug: wire.ProblemUnsupportedMediaType},
		{name: "a +json type not under application/", method: "POST", path: acquire, body: one, header: []string{"Content-Type", "text/x+json"}, want: 415, slug: wire.ProblemUnsupportedMediaType},
		{name: "an application/*+json body", method: "POST", path: acquire, body: one, header: []string{"Content-Type", "application/vnd.limitd+json; charset=utf-8"}, want: 200},
		{name: "a body on a route that takes none", method: "POST", path: "/v1/limiters/x/reset", body: "x", header: []string{"Content-Type", "text/plain"}, want: 415, slug: wire.ProblemUnsupportedMediaType},
		{name: "no body on a route that takes none", method: "POST", path: "/v1/limiters/x/reset", header: []string{"Content-Type", "text/plain"}, want: 200},
		// Host, on a loopback address (DNS rebinding).
		{name: "a name that is not loopback's", method: "GET", path: "/v1/limiters/x", local: "127.0.0.1", host: "evil.example:8080", want: 421, slug: wire.ProblemMisdirected, names: `Host "evil.example:8080"`},
		{name: "a write under that name", method: "POST", path: acquire, body: one, local: "127.0.0.1", host: "evil.example:8080", want: 421, slug: wire.ProblemMisdirected},
		{name: "a LAN address", method: "GET", path: "/v1/limiters/x", local: "127.0.0.1", host: "192.168.1.10:8080", want: 421, slug: wire.ProblemMisdirected},
		{name: "/metrics under that name", method: "GET", path: "/metrics", local: "127.0.0.1", host: "evil.example:8080", want: 421, slug: wire.ProblemMisdirected},
		{name: "127.0.0.1", method: "POST", path: acquire, body: one, local: "127.0.0.1", host: "127.0.0.1:8080", want: 200},
		{name: "another loopback address", method: "GET", path: "/v1/limiters/x", local: "127.0.0.1", host: "127.0.0.2", want: 200},
		{name: "localhost", method: "GET", path: "/v1/limiters/x", local: "127.0.0.1", host: "LocalHost.:8080", want: 200},
		{name: "a name under .localhost", method: "GET", path: "/v1/limiters/x", local: "127.0.0.1", host: "dash.localhost:8080", want: 200},
		{name: "IPv6 loopback", method: "GET", path: "/v1/limiters/x", local: "::1", host: "[::1]:8080", want: 200},
		{name: "IPv6 loopback without a port", method: "GET", path: "/v1/limiters/x", local: "::1", host: "[::1]", want: 200},
		{name: "a name that only looks local", method: "GET", path: "/v1/limiters/x", local: "::1", host: "localhost.evil.example", want: 421, slug: wire.ProblemMisdirected},
		{name: "any name on another address", method: "GET", path: "/v1/limiters/x", local: "10.0.0.5", host: "limitd.example:8080", want: 200},
		{name: "probes are not refused", method: "GET", path: "/healthz", local: "127.0.0.1", host: "evil.example:8080", want: 200},
	}
	// With both tokens every /v1 route needs one: as before, whatever the
	// browser headers; /metrics (no metrics token) is still checked.
	tokened := []browserCase{
		{name: "cross-site with the token", method: "POST", path: acquire, body: one, header: crossSite, want: 200},
		{name: "cross-site config change with the admin token", method: "PATCH", path: "/v1/limiters/x", body: `{"rate":2}`, header: crossSite, want: 200},
		{name: "a body without a Content-Type", method: "POST", path: acquire, body: one, header: []string{"Content-Type", ""}, want: 200},
		{name: "any Host on loopback", method: "GET", path: "/v1/limiters/x", local: "127.0.0.1", host: "evil.example:8080", want: 200},
		{name: "/metrics without its token", method: "GET", path: "/metrics", local: "127.0.0.1", host: "evil.example:8080", want: 421, slug: wire.ProblemMisdirected},
	}
	// With only the admin token, acquires need no token: checked; config
	// changes need it: not.
	adminOnly := []browserCase{
		{name: "cross-site acquire", method: "POST", path: acquire, body: one, header: crossSite, want: 403, slug: wire.ProblemCrossOrigin},
		{name: "cross-site config change with the admin token", method: "PATCH", path: "/v1/limiters/x", body: `{"rate":3}`, header: crossSite, want: 200},
	}
	for _, set := range []struct {
		name  string
		opts  func(*api.Options)
		cases []browserCase
	}{
		{"no tokens", func(*api.Options) {}, untokened},
		{"both tokens", func(o *api.Options) { o.Token, o.AdminToken = "tok", "adm" }, tokened},
		{"admin token only", func(o *api.Options) { o.AdminToken = "adm" }, adminOnly},
	} {
		t.Run(set.name, func(t *testing.T) {
			e := newEnv(t, set.opts)
			e.must(201, "PUT", "/v1/limiters/x", `{"rate":1000}`)
			for _, c := range set.cases {
				before := e.dump()
				r := e.serveAt(c)
				if r.code != c.want {
					t.Errorf("%s: %s %s: %s, want %d", c.name, c.method, c.path, r, c.want)
					continue
				}
				if c.want < 400 {
					continue
				}
				p := r.problem(t)
				if p.Type != wire.ProblemType(c.slug) || !strings.Contains(p.Detail, c.names) {
					t.Errorf("%s: %+v, want type %s naming %q", c.name, p, c.slug, c.names)
				}
				if after := e.dump(); after != before {
					t.Errorf("%s: a refused request changed Redis:\n%s\nthen\n%s", c.name, before, after)
				}
			}
		})
	}
}

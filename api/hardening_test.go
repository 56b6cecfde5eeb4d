package api_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/limitd/limitd/api"
)

// Every GET route answers HEAD with the GET's status and headers, no body.
func TestHeadOnGetRoutes(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/h", `{"rate":100}`)
	e.must(201, "PUT", "/v1/templates/ht", `{"pattern":"h:*","limiter":{"rate":5}}`)
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml", "/v1/limiters",
		"/v1/limiters/h", "/v1/limiters/h/wait", "/v1/templates", "/v1/templates/ht", "/v1/limiters/nope"} {
		get := e.do("GET", path, nil)
		head := e.do("HEAD", path, nil) // checked against openapi.yaml
		if head.code != get.code || head.header.Get("Content-Type") != get.header.Get("Content-Type") {
			t.Errorf("HEAD %s: %d %q; GET %d %q", path, head.code, head.header.Get("Content-Type"), get.code, get.header.Get("Content-Type"))
		}
		// Over a real connection: no body.
		resp, err := http.Head(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != get.code || len(b) != 0 {
			t.Errorf("HEAD %s over HTTP: %d with %d bytes", path, resp.StatusCode, len(b))
		}
	}
}

// JSON keys match exactly and once: encoding/json alone would take "Rate"
// for "rate" and the last of two "rate"s.
func TestJSONKeysExact(t *testing.T) {
	e := newEnv(t)
	before := e.dump()
	for _, c := range []struct{ method, path, body, field, says string }{
		{"PUT", "/v1/limiters/k", `{"Rate":5}`, "Rate", `did you mean "rate"`},
		{"PUT", "/v1/limiters/k", `{"rate":5,"RATE":6}`, "RATE", "case-sensitive"},
		{"PUT", "/v1/limiters/k", `{"rate":5,"rate":6}`, "rate", "twice"},
		{"PUT", "/v1/templates/kt", `{"pattern":"k:*","limiter":{"rate":5,"Burst":2}}`, "limiter.Burst", `did you mean "limiter.burst"`},
		{"PUT", "/v1/templates/kt", `{"pattern":"k:*","pattern":"j:*","limiter":{"rate":5}}`, "pattern", "twice"},
		{"PUT", "/v1/templates/kt", `{"pattern":"k:*","limiter":{"rate":5,"rate":5}}`, "limiter.rate", "twice"},
		{"POST", "/v1/limiters/k/acquire", `{"Permits":2}`, "Permits", "case-sensitive"},
	} {
		r := e.bad(c.method, c.path, c.body)
		p := r.problem(t)
		if r.code != 400 || p.Field != c.field || !strings.Contains(p.Detail, c.says) {
			t.Errorf("%s %s %s: %d %+v, want 400 naming %s", c.method, c.path, c.body, r.code, p, c.field)
		}
	}
	if after := e.dump(); after != before {
		t.Errorf("refused requests wrote to Redis:\n%s", after)
	}
	e.must(201, "PUT", "/v1/limiters/k", `{"rate":5}`)
	r := e.bad("PATCH", "/v1/limiters/k", `{"Rate":7}`)
	if p := r.problem(t); r.code != 400 || p.Field != "Rate" {
		t.Errorf("PATCH {\"Rate\":7}: %d %+v", r.code, p)
	}
	r = e.bad("PATCH", "/v1/limiters/k", `{"rate":7,"rate":8}`)
	if p := r.problem(t); r.code != 400 || p.Field != "rate" {
		t.Errorf("PATCH with rate twice: %d %+v", r.code, p)
	}
}

// A problem repeats at most 64 characters of any input.
func TestEchoedInputClipped(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("n", 5000)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/limiters/" + long, ""},
		{"GET", "/v1/limiters?cursor=" + long, ""},
		{"GET", "/v1/limiters?limit=" + long, ""},
		{"PUT", "/v1/limiters/x", `{"` + long + `":1}`},
		{"PUT", "/v1/limiters/x", `{"spec":"` + long + `"}`},
		{"PUT", "/v1/templates/" + long, `{"pattern":"a*","limiter":{"rate":1}}`},
		{"GET", "/nothing/" + long, ""},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		r := e.bad(c.method, c.path, body)
		p := r.problem(t)
		if r.code < 400 || strings.Contains(p.Detail, strings.Repeat("n", 65)) || utf8.RuneCountInString(p.Detail) > 512 ||
			len(p.Field) > 70 {
			t.Errorf("%s %.40s…: %d, detail of %d bytes: %.200s", c.method, c.path, r.code, len(p.Detail), p.Detail)
		}
	}
}

// With a metrics token, /metrics answers 401 without it.
func TestMetricsToken(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.MetricsToken = "m-secret"; o.Token = "t-secret" })
	r := e.must(401, "GET", "/metrics", nil, "Authorization", "")
	if r.header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	e.must(401, "GET", "/metrics", nil, "Authorization", "Bearer t-secret")
	r = e.must(200, "GET", "/metrics", nil, "Authorization", "Bearer m-secret")
	if !strings.Contains(string(r.body), "limitd_http_requests_total") {
		t.Errorf("metrics: %.200s", r.body)
	}
	// Without one, /metrics stays open.
	newEnv(t).must(200, "GET", "/metrics", nil)
}

// slowConn opens a connection to srv and sends a request whose body
// declares 100 bytes and carries 10, then nothing more.
func slowRequest(t *testing.T, addr, header string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := "PUT /v1/limiters/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n" +
		header + "\r\n" + `{"rate":1 `
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return c
}

// readAnswer reads the answer to a slow request and then waits for the
// server to close the connection; limit only keeps a broken server from
// hanging the test.
func readAnswer(t *testing.T, c net.Conn, limit time.Duration) *http.Response {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(limit))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("the server kept the connection open after %d: %v", resp.StatusCode, err)
	}
	return resp
}

// Under an http.Server whose ReadTimeout is no longer than BodyTimeout (as
// limitd serve runs it), the server's bound is the body's: a slow body is a
// 408 that names it, and a request whose body has been read goes on past it
// (a blocking acquire that waits longer is granted, not cancelled).
func TestServerBoundsBody(t *testing.T) {
	e := newEnv(t)
	srv := httptest.NewUnstartedServer(e.h)
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	c := slowRequest(t, strings.TrimPrefix(srv.URL, "http://"), "")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // only a broken server hangs here
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("slow body: no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close || !strings.Contains(string(body), "within 200ms") {
		t.Errorf("slow body: %d, Connection: close %v, %s", resp.StatusCode, resp.Close, body)
	}

	e.must(201, "PUT", "/v1/limiters/s", `{"kind":"smooth","rate":2.5}`)
	for i, want := range []int64{0, 4e8} {
		resp, err := http.Post(srv.URL+"/v1/limiters/s/acquire", "application/json", strings.NewReader(`{"block":true}`))
		if err != nil {
			t.Fatal(err)
		}
		r := &reply{code: resp.StatusCode, header: resp.Header}
		r.body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if r.code != http.StatusOK || r.num(t, "delay_ns") != want {
			t.Errorf("blocking acquire %d: %s, want 200 with delay_ns %d", i, r, want)
		}
	}
}

// A body that never arrives whole is a 408 after BodyTimeout and the
// connection is closed; a request refused for its token is answered at once
// and its connection closed, without waiting for the body.
func TestSlowBody(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.BodyTimeout = 100 * time.Millisecond })
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	resp := readAnswer(t, slowRequest(t, addr, ""), 10*time.Second)
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
		t.Errorf("slow body: %d, Connection: close %v", resp.StatusCode, resp.Close)
	}

	// A body timeout of an hour: only the refusal can close the connection
	// before the test's limit.
	e = newEnv(t, func(o *api.Options) { o.BodyTimeout = time.Hour; o.AdminToken = "adm" })
	srv2 := httptest.NewServer(e.h)
	t.Cleanup(srv2.Close)
	addr = strings.TrimPrefix(srv2.URL, "http://")
	for _, h := range []string{"", "Authorization: Bearer wrong\r\n"} {
		resp = readAnswer(t, slowRequest(t, addr, h), 10*time.Second)
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Errorf("%q: %d, Connection: close %v", h, resp.StatusCode, resp.Close)
		}
	}
	// A body over the limit is refused before reading, the same way.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "PUT /v1/limiters/big HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer adm\r\nContent-Length: 100000\r\n\r\n{")
	if resp = readAnswer(t, c, 10*time.Second); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the limit: %d", resp.StatusCode)
	}
}

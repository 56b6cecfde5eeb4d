package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/coremetrics"
	"github.com/limitd/limitd/store"
)

// t0 is the Redis time every env starts at; tests move it with m.SetTime so
// that every delay they check is exact.
var t0 = time.Unix(1_750_000_000, 0)

// spec is api/openapi.yaml, loaded and validated once.
var spec = sync.OnceValues(func() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(openapiFile())
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background())
})

var specRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := spec()
	if err != nil {
		return nil, err
	}
	// The tests serve on free ports: routes are matched on the path alone,
	// whatever the document's servers say.
	d := *doc
	d.Servers = nil
	return legacy.NewRouter(&d)
})

// covered records every operation ("PUT /v1/limiters/{name}") that a test
// got a 2xx from; TestMain checks that no operation of the spec is left out.
var covered sync.Map

func TestMain(m *testing.M) {
	flag.Parse()
	// The event stream is text: its body is checked as a string.
	openapi3filter.RegisterBodyDecoder("text/html", func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(body)
		return string(b), err
	})
	openapi3filter.RegisterBodyDecoder("text/event-stream",
		func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
			b, err := io.ReadAll(body)
			return string(b), err
		})
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && !testing.Short() {
		doc, err := spec()
		if err != nil {
			fmt.Println("openapi.yaml:", err)
			os.Exit(1)
		}
		var missing []string
		for path, item := range doc.Paths.Map() {
			for method := range item.Operations() {
				if _, ok := covered.Load(method + " " + path); !ok {
					missing = append(missing, method+" "+path)
				}
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			fmt.Println("FAIL: no test got a 2xx from these operations of openapi.yaml:", missing)
			code = 1
		}
	}
	os.Exit(code)
}

// env is one API handler over a fresh miniredis.
type env struct {
	t     testing.TB
	m     *miniredis.Miniredis
	rdb   *redis.Client
	st    *store.Store
	h     http.Handler
	reg   *prometheus.Registry
	token string // sent as the bearer token unless a call sets Authorization
	// sampling: the handler's sampler (Handler.Run) runs, until the test
	// ends.
	sampling bool
}

// sampled1 runs e's sampler and waits for its first round, which reads
// every limiter as it stands now.
func (e *env) sampled1() {
	e.t.Helper()
	e.sample(nil)
	h := e.h.(*api.Handler)
	for deadline := time.Now().Add(10 * time.Second); api.SignalRounds(h) == 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatal("the sampler's first round: not within 10 s")
		}
	}
}

// sample runs e's sampler (Handler.Run) until the test ends; tick, when
// not nil, drives its rounds (one a second otherwise).
func (e *env) sample(tick <-chan time.Time) {
	e.t.Helper()
	if e.sampling {
		e.t.Fatal("the sampler runs already")
	}
	e.sampling = true
	h := e.h.(*api.Handler)
	if tick != nil {
		api.SetSignalTicker(h, tick)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx); close(done) }()
	e.t.Cleanup(func() { cancel(); <-done })
}

func newEnv(t testing.TB, opts ...func(*api.Options)) *env {
	t.Helper()
	return newEnvRedis(t, nil, opts...)
}

// newEnvRedis is newEnv with the Redis client options changed by ro.
func newEnvRedis(t testing.TB, ro func(*redis.Options), opts ...func(*api.Options)) *env {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(t0)
	rop := &redis.Options{Addr: m.Addr()}
	if ro != nil {
		ro(rop)
	}
	rdb := redis.NewClient(rop)
	t.Cleanup(func() { _ = rdb.Close() })
	e := &env{t: t, m: m, rdb: rdb, st: store.New(rdb), reg: prometheus.NewRegistry()}
	o := api.Options{Service: core.New(e.st, core.Options{Observer: coremetrics.New(e.reg)}), Registry: e.reg}
	for _, f := range opts {
		f(&o)
	}
	e.token = o.AdminToken
	if e.token == "" {
		e.token = o.Token
	}
	e.h = api.New(o)
	return e
}

// reply is a response the helper checked against openapi.yaml.
type reply struct {
	code   int
	header http.Header
	body   []byte
}

func (r *reply) String() string { return fmt.Sprintf("%d %s", r.code, r.body) }

func (r *reply) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", r, err)
	}
}

// obj decodes the body as a JSON object.
func (r *reply) obj(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.decode(t, &m)
	return m
}

// num reads an integer field of a JSON object body exactly.
func (r *reply) num(t testing.TB, path ...string) int64 {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %s: %v", r, err)
	}
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%v: not an object in %s", path, r)
		}
		v = m[p]
	}
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v: not a number in %s", path, r)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatalf("%v: %v", path, err)
	}
	return i
}

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Field  string `json:"field"`
}

func (r *reply) problem(t testing.TB) problemBody {
	t.Helper()
	var p problemBody
	r.decode(t, &p)
	return p
}

// do sends a request that follows the contract: it must validate against
// openapi.yaml, and so must the response.
func (e *env) do(method, path string, body any, header ...string) *reply {
	e.t.Helper()
	return e.send(true, method, path, body, header...)
}

// bad sends a request that may break the contract; only the response is
// checked against openapi.yaml.
func (e *env) bad(method, path string, body any, header ...string) *reply {
	e.t.Helper()
	return e.send(false, method, path, body, header...)
}

// must is do that also requires the status.
func (e *env) must(want int, method, path string, body any, header ...string) *reply {
	e.t.Helper()
	r := e.send(true, method, path, body, header...)
	if r.code != want {
		e.t.Fatalf("%s %s: got %s, want %d", method, path, r, want)
	}
	return r
}

// chunked is a body sent without a Content-Length.
type chunked string

// send serves one request through the handler. body is nil (none), a string
// or []byte (sent as is) or any other value (sent as JSON). header holds
// name, value pairs; they replace the defaults (Content-Type: application/json
// with a body, Authorization: Bearer e.token); an empty value removes one.
func (e *env) send(valid bool, method, path string, body any, header ...string) *reply {
	t := e.t
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case chunked:
		raw = []byte(b)
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	newReq := func() *http.Request {
		var rd io.Reader = http.NoBody
		switch body.(type) {
		case nil:
		case chunked: // hides the length: no Content-Length header
			rd = io.MultiReader(bytes.NewReader(raw))
		default:
			rd = bytes.NewReader(raw)
		}
		req := httptest.NewRequest(method, "http://limitd.test"+path, rd)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if e.token != "" {
			req.Header.Set("Authorization", "Bearer "+e.token)
		}
		for i := 0; i+1 < len(header); i += 2 {
			if header[i+1] == "" {
				req.Header.Del(header[i])
			} else {
				req.Header.Set(header[i], header[i+1])
			}
		}
		return req
	}

	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, newReq())
	r := &reply{code: rec.Code, header: rec.Result().Header, body: rec.Body.Bytes()}

	if r.header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s: no X-Request-Id in the response", method, path)
	}
	if r.code >= 400 && r.code != http.StatusTooManyRequests { // a denied acquire is not a failure
		checkProblem(t, method, path, r)
	}
	e.validate(valid, newReq(), r)
	return r
}

// checkProblem checks what every error response must be.
func checkProblem(t testing.TB, method, path string, r *reply) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s %s: %d with Content-Type %q, want application/problem+json", method, path, r.code, ct)
		return
	}
	var p problemBody
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Errorf("%s %s: problem body %q: %v", method, path, r.body, err)
		return
	}
	if p.Status != r.code || p.Type == "" || p.Title == "" || p.Detail == "" {
		t.Errorf("%s %s: incomplete problem %s for status %d", method, path, r.body, r.code)
	}
}

// validate checks req (if it claims to follow the contract) and r against
// openapi.yaml.
func (e *env) validate(valid bool, req *http.Request, r *reply) {
	t := e.t
	t.Helper()
	router, err := specRouter()
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	ctx := context.Background()
	route, params, err := router.FindRoute(req)
	for _, v := range params {
		if v == "" && err == nil { // the legacy router lets {name} match nothing
			err = fmt.Errorf("empty path parameter")
		}
	}
	if err != nil {
		// Not an operation of the spec (an unknown route, a wrong method):
		// the answer must still be a problem.
		if valid {
			t.Errorf("%s %s: not in openapi.yaml: %v", req.Method, req.URL.Path, err)
		}
		doc, _ := spec()
		if err := doc.Components.Schemas["Problem"].Value.VisitJSON(jsonValue(t, r.body)); err != nil {
			t.Errorf("%s %s: %d body is not a Problem: %v", req.Method, req.URL.Path, r.code, err)
		}
		return
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, SkipSettingDefaults: true},
	}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && valid {
		t.Errorf("%s %s: the request breaks openapi.yaml: %v", req.Method, req.URL.Path, err)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: r.code, Header: r.header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	out.SetBodyBytes(r.body)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("%s %s: the %d response breaks openapi.yaml: %v\nbody: %s", req.Method, req.URL.Path, r.code, err, r.body)
	}
	if r.code >= 200 && r.code < 300 {
		covered.Store(route.Method+" "+route.Path, true)
	}
}

func jsonValue(t testing.TB, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Errorf("not JSON: %q: %v", b, err)
	}
	return v
}

// at moves the Redis clock to t0 + d.
func (e *env) at(d time.Duration) { e.m.SetTime(t0.Add(d)) }

// keys returns a dump of everything in Redis, to show that a rejected write
// changed nothing.
func (e *env) dump() string { return e.m.Dump() }

// openapiFile is api/openapi.yaml, which the handler embeds and serves.
func openapiFile() []byte {
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		panic(err)
	}
	return b
}

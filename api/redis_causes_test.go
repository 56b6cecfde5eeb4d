package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/store"
)

// newEnvAt is an API handler over rdb.
func newEnvAt(t *testing.T, rdb *redis.Client) *env {
	t.Helper()
	e := &env{t: t, rdb: rdb, st: store.New(rdb), reg: prometheus.NewRegistry()}
	e.h = api.New(api.Options{Service: core.New(e.st, core.Options{}), Registry: e.reg})
	return e
}

// A Redis that refuses limitd's credentials (WRONGPASS, NOAUTH) or its
// user's permissions (NOPERM), or is a read-only replica (READONLY), is a
// 503 whose type and "redis" say which and whose detail names the
// condition and the variable to fix, on every route, /readyz included;
// and the event stream's status says the same. Never a 500, never "ok".
func TestRedisCausesNamed(t *testing.T) {
	srv := redistest.Server(t)
	srv.AddUser("limitd", "right-pw")
	// may read and ping, not write nor run scripts or functions
	srv.AddUser("reader", "reader-pw", "~*", "+@read", "+ping", "+hello", "+time", "+info")
	srv.AddUser("default", "admin-pw") // requirepass
	master := redistest.Server(t)
	replica := redistest.Server(t, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port()))

	for _, c := range []struct {
		name                  string
		srv                   *redistest.Instance
		user, password        string
		condition, typ, redis string
		fix                   string // in the detail
	}{
		{"WRONGPASS", srv, "limitd", "wrong-pw", "WRONGPASS", "redis-unauthorized", "unauthorized", "user name and password Redis expects in LIMITD_REDIS_URL"},
		{"NOAUTH", srv, "", "", "NOAUTH", "redis-unauthorized", "unauthorized", "user name and password Redis expects in LIMITD_REDIS_URL"},
		{"NOPERM", srv, "reader", "reader-pw", "NOPERM", "redis-unauthorized", "unauthorized", "or name another user in LIMITD_REDIS_URL"},
		{"READONLY", replica, "", "", "READONLY", "redis-read-only", "read-only", "point LIMITD_REDIS_URL at the master"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnvAt(t, c.srv.UserClient(c.user, c.password))
			for _, r := range []struct{ method, path, body string }{
				{"GET", "/readyz", ""},
				{"PUT", "/v1/limiters/r", `{"rate":100}`},
				{"POST", "/v1/limiters/r/acquire", `{"permits":1}`},
			} {
				var body any
				if r.body != "" {
					body = r.body
				}
				rep := e.must(503, r.method, r.path, body)
				var p struct {
					Type, Detail, Redis string
				}
				if err := json.Unmarshal(rep.body, &p); err != nil {
					t.Fatalf("%s %s: %v", r.method, r.path, err)
				}
				if p.Type != "urn:limitd:problem:"+c.typ || p.Redis != c.redis ||
					!strings.Contains(p.Detail, c.condition+": ") || !strings.Contains(p.Detail, c.fix) {
					t.Errorf("%s %s: %s, want type %s, redis %q, a detail naming %s and %q", r.method, r.path, rep.body, c.typ, c.redis, c.condition, c.fix)
				}
				if strings.Contains(p.Detail, "pw") {
					t.Errorf("%s %s: the detail shows a password: %s", r.method, r.path, p.Detail)
				}
			}
			events, stop := e.stream("/v1/events")
			defer stop()
			st := statusOf(t, next(t, events, func(ev sseEvent) bool { return ev.name == "status" }))
			if st.Redis != c.redis || st.Ready || !strings.Contains(st.RedisDetail, c.condition+": ") || !strings.Contains(st.RedisDetail, c.fix) {
				t.Errorf("status %+v, want redis %q, not ready, a detail naming %s and its fix", st, c.redis, c.condition)
			}
		})
	}

	// The same server with the right credentials serves: the failures
	// above were the credentials', not the server's.
	e := newEnvAt(t, srv.UserClient("limitd", "right-pw"))
	if r := e.must(200, "GET", "/readyz", nil); !strings.Contains(string(r.body), `"redis":"ok"`) {
		t.Errorf("/readyz with the right password: %s", r)
	}
	e.must(201, "PUT", "/v1/limiters/r", `{"rate":100}`)
}

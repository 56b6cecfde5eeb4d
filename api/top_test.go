package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
)

// newLedgerEnv is newEnv whose service counts decisions in a ledger the
// test flushes.
func newLedgerEnv(t *testing.T) (*env, *core.Ledger) {
	e := newEnv(t)
	led := core.NewLedger(e.st, core.LedgerOptions{Clock: func() time.Time { return t0 }})
	e.reg = prometheus.NewRegistry()
	e.h = api.New(api.Options{Service: core.New(e.st, core.Options{Ledger: led}), Registry: e.reg})
	return e, led
}

// A template's busiest instances, totals on an instance's view, and the
// list of templates with their instances, as the HTTP API answers them.
func TestTopInstances(t *testing.T) {
	e, led := newLedgerEnv(t)
	e.must(201, "PUT", "/v1/templates/per-user", `{"pattern":"user:*","limiter":{"kind":"window","limit":1,"period":"1h"}}`)
	for i, n := range map[string]int{"user:1": 3, "user:2": 5, "user:3": 1} {
		for range n {
			e.do("POST", "/v1/limiters/"+i+"/acquire", `{}`)
		}
	}
	if err := led.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	top := e.must(200, "GET", "/v1/templates/per-user/top?by=refused&limit=2", nil)
	var got struct {
		By        string
		Since     int64 `json:"since_ns"`
		Instances []struct {
			Name             string
			Refused, Granted int64
		}
	}
	top.decode(t, &got)
	if s := fmt.Sprint(got.Instances); got.By != "refused" || s != "[{user:2 4 1} {user:1 2 1}]" || got.Since <= 0 {
		t.Errorf("top: %s", top.body)
	}
	if g := e.must(200, "GET", "/v1/templates/per-user/top?by=granted&minutes=15", nil); !strings.Contains(string(g.body), `"user:3","refused":0,"granted":1`) {
		t.Errorf("top by granted: %s", g.body)
	}
	if v := e.must(200, "GET", "/v1/limiters/user:2", nil); strings.Contains(string(v.body), `"totals"`) || !strings.Contains(string(v.body), `"template":"per-user"`) {
		t.Errorf("user:2: %s; want an instance of per-user without totals (they count under the template)", v.body)
	}
	for q, field := range map[string]string{"by=both": "by", "limit=0": "limit", "limit=101": "limit", "minutes=16": "minutes", "minutes=x": "minutes"} {
		if p := e.bad("GET", "/v1/templates/per-user/top?"+q, nil); p.code != 400 || p.problem(t).Field != field {
			t.Errorf("?%s: %s, want 400 naming %s", q, p, field)
		}
	}
	e.must(404, "GET", "/v1/templates/nobody/top", nil)
	e.must(200, "HEAD", "/v1/templates/per-user/top", nil)

	// A named limiter matching the pattern is no instance.
	e.must(201, "PUT", "/v1/limiters/user:vip", `{"rate":10}`)
	e.must(200, "POST", "/v1/limiters/user:vip/acquire", nil)
	list := e.must(200, "GET", "/v1/templates?instances=true", nil)
	if !strings.Contains(string(list.body), `"instances":3`) {
		t.Errorf("templates?instances=true: %s", list.body)
	}
	if plain := e.must(200, "GET", "/v1/templates", nil); strings.Contains(string(plain.body), "instances") {
		t.Errorf("templates without instances=true: %s", plain.body)
	}
	if p := e.bad("GET", "/v1/templates?instances=maybe", nil); p.code != 400 || p.problem(t).Field != "instances" {
		t.Errorf("instances=maybe: %s", p)
	}

	m := string(e.must(200, "GET", "/metrics", nil).body)
	for _, want := range []string{
		`limitd_template_instances{template="per-user"} 3`,
		`limitd_template_top_permits{by="refused",key="user:2",template="per-user"} 4`,
		`limitd_template_top_permits{by="granted",key="user:3",template="per-user"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

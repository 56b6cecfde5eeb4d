package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/limitd/limitd/envoyrules"
	"github.com/limitd/limitd/wire"
)

const fixedBoot = `
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 10}
`

// limitd ctl get shows a rate_limit rule's counter as Envoy's calls counted
// it (in keys of their own, under the default counting): N calls, limit − N
// remaining, and the window's end on Redis' clock; and limitd ctl reset
// starts its window afresh: limit remaining, and the next call counts from
// nothing.
func TestCtlGetFixedCounter(t *testing.T) {
	file := filepath.Join(t.TempDir(), "boot.yaml")
	if err := os.WriteFile(file, []byte(fixedBoot), 0o600); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Domains []envoyrules.Domain `yaml:"domains"`
	}
	if err := yaml.Unmarshal([]byte(fixedBoot), &doc); err != nil {
		t.Fatal(err)
	}
	rules, err := envoyrules.Compile(doc.Domains)
	if err != nil {
		t.Fatal(err)
	}
	cs, _, err := rules.Counters("api", []envoyrules.Request{{Entries: []envoyrules.Entry{{Key: "user", Value: "ann"}}, Hits: 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	base, logs, _ := startServe(t, map[string]string{"LIMITD_GRPC_ADDR": "127.0.0.1:0", "LIMITD_CONFIG": file})
	c := rlv3.NewRateLimitServiceClient(grpcClient(t, logs))
	const n = 4
	var last *rlv3.RateLimitResponse_DescriptorStatus
	for range n {
		r, err := c.ShouldRateLimit(context.Background(), rlRequest("api", "user", "ann"))
		if err != nil || r.OverallCode != rlv3.RateLimitResponse_OK {
			t.Fatalf("call: %v, %v", r, err)
		}
		last = r.Statuses[0]
	}
	out, err := ctlRun(t, base, nil, "get", cs[0].Name)
	if err != nil {
		t.Fatalf("ctl get: %v\n%s", err, out)
	}
	var v wire.Limiter
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("ctl get: %v\n%s", err, out)
	}
	if v.State == nil || v.State.Window == nil {
		t.Fatalf("ctl get: no window state:\n%s", out)
	}
	w, day := v.State.Window, int64(24*time.Hour)
	end := v.State.Now - v.State.Now%day + day // the window of Redis' time the answer read
	if w.Limit != 10 || w.Remaining != 10-n || w.Remaining != int64(last.LimitRemaining) || w.ResetAt != end || w.Reset != end-v.State.Now {
		t.Errorf("ctl get: %+v at %d; want %d of 10 remaining (the last call said %d), resetting at %d", *w, v.State.Now, 10-n, last.LimitRemaining, end)
	}

	if out, err := ctlRun(t, base, nil, "reset", cs[0].Name); err != nil {
		t.Fatalf("ctl reset: %v\n%s", err, out)
	}
	if out, err = ctlRun(t, base, nil, "get", cs[0].Name); err != nil {
		t.Fatalf("ctl get: %v\n%s", err, out)
	}
	v = wire.Limiter{}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.State == nil || v.State.Window == nil {
		t.Fatalf("ctl get after the reset: %v\n%s", err, out)
	}
	if w := v.State.Window; w.Remaining != 10 || v.State.Started {
		t.Errorf("after ctl reset: %+v, started %v; want 10 of 10 remaining, not started", *w, v.State.Started)
	}
	r, err := c.ShouldRateLimit(context.Background(), rlRequest("api", "user", "ann"))
	if err != nil || r.Statuses[0].LimitRemaining != 9 {
		t.Errorf("the call after ctl reset: %v, %v; want 9 remaining", r, err)
	}
}

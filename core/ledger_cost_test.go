package core

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// commands is how many commands Redis ran since its stats were reset (INFO
// commandstats, every command but INFO and CONFIG, those inside scripts
// included), in all and by name.
func commands(t *testing.T, rdb *redis.Client) (int64, map[string]int64) {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	by := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		// cmdstat_hincrby:calls=3,usec=...
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || strings.HasPrefix(name, "cmdstat_info") || strings.HasPrefix(name, "cmdstat_config") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats %q: %v", line, err)
		}
		n += c
		by[strings.TrimPrefix(name, "cmdstat_")] = c
	}
	return n, by
}

// What the operator view costs Redis: the ledger adds no command to an
// acquire, granted or refused (the same acquires of template instances run
// the same commands with it and without it), and one flush of what they
// counted is bounded by the templates decided on, not by the decisions
// nor by the instances: per template 2 HINCRBY (calls, permits) and a
// PEXPIRE, and at most TopK ZINCRBY and a PEXPIRE by refused and by
// granted (instances have no totals of their own). The numbers in the README come from this test (-v logs them).
// Besides the acquires, Redis may run a command now and then on a timer (a
// refresh of the templates' cache): the runs with and without the ledger
// may differ by those, far less than one command per acquire, and never
// by a command the ledger writes with.
func TestLedgerRedisCost(t *testing.T) {
	srv := redistest.Server(t)
	rdb := srv.Client()
	ctx := context.Background()
	const acquires, instances = 10_000, 100
	for _, c := range []struct {
		path  string
		limit int64 // a window of limit per hour: 1 grants the first acquire of each instance, then refuses
	}{{"granted", 1 << 31}, {"refused", 1}} {
		var cost [2]int64 // the acquires' commands without and with the ledger
		for i, on := range []bool{false, true} {
			st := store.New(rdb, store.WithPrefix(fmt.Sprintf("cost%s%v", c.path, on)))
			o := Options{Observer: &recorder{}}
			var led *Ledger
			if on {
				led = NewLedger(st, LedgerOptions{})
				o.Ledger = led
			}
			s := New(st, o)
			if _, _, err := s.PutTemplate(ctx, limitd.Template{ID: "per-user", Pattern: "user:*",
				Limiter: limiter.Config{Kind: limiter.KindWindow, Limit: &c.limit, Period: "1h"}}); err != nil {
				t.Fatal(err)
			}
			for n := range instances { // each instance's first acquire, and the template's load, before counting
				if _, err := s.Acquire(ctx, AcquireRequest{Name: fmt.Sprint("user:", n), Permits: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if on {
				_ = led.Flush(ctx)
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			granted := 0
			for n := range acquires {
				a, err := s.Acquire(ctx, AcquireRequest{Name: fmt.Sprint("user:", n%instances), Permits: 1})
				if err != nil {
					t.Fatal(err)
				}
				if a.Rate.Granted {
					granted++
				}
			}
			if want := map[string]int{"granted": acquires, "refused": 0}[c.path]; granted != want {
				t.Fatalf("%s path: %d of %d granted", c.path, granted, acquires)
			}
			var by map[string]int64
			cost[i], by = commands(t, rdb)
			if !on {
				continue
			}
			for _, cmd := range []string{"hincrby", "zincrby", "pexpire"} {
				if by[cmd] != 0 {
					t.Errorf("%s path: %d %s among the acquires' commands: the ledger wrote on a decision's path", c.path, by[cmd], cmd)
				}
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if err := led.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			flush, _ := commands(t, rdb)
			const templates, topK = 1, 100
			bound := int64(3*templates + 2*(topK+1)*templates)
			t.Logf("%s path: %d acquires of %d instances: %d commands without the ledger, %d with it; one flush of them: %d commands (bound %d)",
				c.path, acquires, instances, cost[0], cost[1], flush, bound)
			if flush <= 0 || flush > bound {
				t.Errorf("%s path: a flush ran %d commands, want 1 to %d", c.path, flush, bound)
			}
		}
		if d := cost[1] - cost[0]; d*100 > acquires || d*100 < -acquires {
			t.Errorf("%s path: %d commands with the ledger, %d without: it must add none per acquire", c.path, cost[1], cost[0])
		}
	}
}

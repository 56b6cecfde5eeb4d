package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/lua"
)

func stClusterFactory(t *testing.T) stFactory {
	cl := redistest.Cluster(t)
	return func(t *testing.T) redis.UniversalClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// TestStoreCluster runs the functional suite on a three-master Redis Cluster,
// then what only a cluster has: keys spread over slots and nodes, and scripts
// lost on every node at once (the stores run every operation as a script
// here; TestFunctions/cluster loses the function library instead).
func TestStoreCluster(t *testing.T) {
	f := stClusterFactory(t)
	stSuite(t, f)
	t.Run("SpreadAndScriptFlush", func(t *testing.T) { stTestClusterSpread(t, f) })
}

func stTestClusterSpread(t *testing.T, f stFactory) {
	rdb := f(t)
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("not a cluster client: %T", rdb)
	}
	s := stStore(t, rdb, withScriptsOnly())
	batched := New(rdb, WithPrefix(s.Prefix()), WithBatching(16), withScriptsOnly())
	defer batched.Close()
	ctx := t.Context()

	const n = 120
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("c-%03d", i)
		stPut(t, s, names[i], stSched(1000, 1))
	}
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "inst", Pattern: "ci-*", Limiter: stSched(1000, 1)}); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		stAcquire(t, s, fmt.Sprintf("ci-%03d", i), 1, limitd.Forever)
	}

	// Every master holds some limiters and some instances.
	byNode := stKeysByNode(t, s)
	if len(byNode) != 3 {
		t.Fatalf("keys found on %d masters, want 3: %v", len(byNode), byNode)
	}
	total := 0
	for addr, keys := range byNode {
		lims, insts := 0, 0
		for _, k := range keys {
			switch {
			case strings.HasSuffix(k, "}:l"):
				lims++
			case strings.HasSuffix(k, "}:i"):
				insts++
			}
		}
		if lims == 0 || insts == 0 {
			t.Errorf("master %s holds %d limiters and %d instances, want some of each", addr, lims, insts)
		}
		total += lims
	}
	if total != n {
		t.Errorf("%d limiter hashes on the masters, want %d", total, n)
	}

	last := make(map[string]int64, n)
	acquireAll := func(round string) {
		t.Helper()
		for _, name := range names {
			d, err := s.Acquire(ctx, name, 1, limitd.Forever)
			if err != nil || !d.Granted {
				t.Fatalf("%s: Acquire(%s) = %+v, %v", round, name, d, err)
			}
			if prev, ok := last[name]; ok && d.Scheduled != prev+1e6 {
				t.Errorf("%s: %s due +%d after the previous permit, want +1ms", round, name, d.Scheduled-prev)
			}
			last[name] = d.Scheduled
		}
	}
	acquireAll("first round")

	hashes := []string{}
	for _, op := range []string{lua.Acquire, lua.Configure, lua.Delete, lua.Peek} {
		hashes = append(hashes, s.scripts[op].Hash())
	}
	flush := func() {
		t.Helper()
		if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				return err
			}
			ex, err := c.ScriptExists(ctx, hashes...).Result()
			if err != nil {
				return err
			}
			for i, e := range ex {
				if e {
					return fmt.Errorf("%s still has script %s after SCRIPT FLUSH", c.Options().Addr, hashes[i])
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
	}

	// EVALSHA fails with NOSCRIPT on every node; go-redis' Script.Run falls
	// back to EVAL on the node that owns the key.
	flush()
	acquireAll("after SCRIPT FLUSH")

	// The pipelined batch reloads the script on every node and runs again
	// what failed.
	flush()
	reqs := make([]Request, n)
	for i, name := range names {
		reqs[i] = Request{Name: name, Permits: 1, MaxWait: limitd.Forever}
	}
	for i, o := range s.AcquireMany(ctx, reqs) {
		if o.Err != nil || !o.Granted {
			t.Fatalf("AcquireMany after SCRIPT FLUSH: %s = %+v", names[i], o)
		}
		if o.Scheduled != last[names[i]]+1e6 {
			t.Errorf("AcquireMany after SCRIPT FLUSH: %s due +%d, want +1ms", names[i], o.Scheduled-last[names[i]])
		}
		last[names[i]] = o.Scheduled
	}

	// The automatic batcher rides on the same pipeline.
	flush()
	for _, name := range names[:20] {
		d, err := batched.Acquire(ctx, name, 1, limitd.Forever)
		if err != nil || d.Scheduled != last[name]+1e6 {
			t.Fatalf("batched Acquire(%s) after SCRIPT FLUSH = %+v, %v", name, d, err)
		}
		last[name] = d.Scheduled
	}

	// Every other script recovers too.
	flush()
	if _, err := s.Wait(ctx, names[0]); err != nil {
		t.Errorf("Wait after SCRIPT FLUSH: %v", err)
	}
	if _, err := s.Reset(ctx, names[1]); err != nil {
		t.Errorf("Reset after SCRIPT FLUSH: %v", err)
	}
	if g, err := s.Grant(ctx, names[2], 4, limitd.Forever); err != nil {
		t.Errorf("Grant after SCRIPT FLUSH: %v", err)
	} else if _, err := s.Release(ctx, g, 2); err != nil {
		t.Errorf("Release after SCRIPT FLUSH: %v", err)
	}
	if info, _, err := s.Put(ctx, names[3], stSched(500, 1)); err != nil || info.Version != 2 {
		t.Errorf("Put after SCRIPT FLUSH = %+v, %v", info, err)
	}
	if err := s.Delete(ctx, names[4]); err != nil {
		t.Errorf("Delete after SCRIPT FLUSH: %v", err)
	}
	if infos, next, err := s.List(ctx, "", 1000); err != nil || len(infos) != n-1 || next != "" {
		t.Errorf("List over the cluster: %d limiters, next %q, %v; want %d", len(infos), next, err, n-1)
	}
}

package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

func TestServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Server(t)

	if s.Port() == 6379 {
		t.Fatal("Server must never use the default Redis port")
	}
	if want := fmt.Sprintf("127.0.0.1:%d", s.Port()); s.Addr() != want {
		t.Fatalf("Addr() = %q, want %q", s.Addr(), want)
	}

	c := s.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want \"v\"", got, err)
	}

	port := s.Port()
	s.Restart()
	if s.Port() != port {
		t.Fatalf("Restart moved the server from port %d to %d", port, s.Port())
	}
	c = s.Client()
	if _, err := c.Get(ctx, "k").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: err = %v, want redis.Nil", err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after Restart = %d, %v; want 0", n, err)
	}

	s.Stop()
	s.Stop() // must be a no-op
	// No retries: the default client would spend over a second redialling a
	// server that is known to be gone.
	dead := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1})
	defer dead.Close()
	if err := dead.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded after Stop")
	}
}

func TestServerArgs(t *testing.T) {
	t.Parallel()
	s := redistest.Server(t, "--maxmemory", "12mb")
	got, err := s.Client().ConfigGet(context.Background(), "maxmemory").Result()
	if err != nil {
		t.Fatalf("CONFIG GET: %v", err)
	}
	if got["maxmemory"] != "12582912" {
		t.Fatalf("maxmemory = %q, want 12582912", got["maxmemory"])
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := redistest.Cluster(t)

	if n := len(cl.Addrs()); n != 3 {
		t.Fatalf("Addrs() has %d entries, want 3", n)
	}
	for _, a := range cl.Addrs() {
		if strings.HasSuffix(a, ":6379") {
			t.Fatalf("cluster node on the default Redis port: %s", a)
		}
	}

	c := cl.Client()
	const keys = 100
	for i := range keys {
		if err := c.Set(ctx, fmt.Sprintf("key:%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET key:%d: %v", i, err)
		}
	}
	for i := range keys {
		got, err := c.Get(ctx, fmt.Sprintf("key:%d", i)).Int()
		if err != nil || got != i {
			t.Fatalf("GET key:%d = %d, %v; want %d", i, got, err, i)
		}
	}

	var total int64
	nodesWithKeys := 0
	for _, n := range cl.Nodes() {
		size, err := n.Client().DBSize(ctx).Result()
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", n.Addr(), err)
		}
		total += size
		if size > 0 {
			nodesWithKeys++
		}
	}
	if total != keys {
		t.Fatalf("nodes hold %d keys in total, want %d", total, keys)
	}
	if nodesWithKeys < 2 {
		t.Fatalf("keys landed on %d node(s), want them spread over several", nodesWithKeys)
	}
}

// fakeTB records Skip and Fatal instead of stopping the goroutine, so Require's
// decision can be observed. Embedding testing.TB satisfies its private method.
type fakeTB struct {
	testing.TB
	skipped, fataled string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Skip(args ...any)  { f.skipped = fmt.Sprint(args...) }
func (f *fakeTB) Fatal(args ...any) { f.fataled = fmt.Sprint(args...) }

func TestRequire(t *testing.T) {
	const bin = "redistest-no-such-binary"

	t.Setenv(redistest.RequireEnv, "")
	f := &fakeTB{TB: t}
	redistest.Require(f, bin)
	if f.fataled != "" || !strings.HasPrefix(f.skipped, bin+" not installed: install redis-server and redis-tools") {
		t.Fatalf("without %s: skipped=%q fataled=%q, want a skip", redistest.RequireEnv, f.skipped, f.fataled)
	}

	t.Setenv(redistest.RequireEnv, "1")
	f = &fakeTB{TB: t}
	redistest.Require(f, bin)
	if f.skipped != "" || !strings.HasPrefix(f.fataled, bin+" not installed") {
		t.Fatalf("with %s=1: skipped=%q fataled=%q, want a failure", redistest.RequireEnv, f.skipped, f.fataled)
	}

	// The test binary itself is the one executable certain to exist.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f = &fakeTB{TB: t}
	redistest.Require(f, self)
	if f.skipped != "" || f.fataled != "" {
		t.Fatalf("installed binary: skipped=%q fataled=%q, want neither", f.skipped, f.fataled)
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := redistest.Server(t)
	r := redistest.Replica(t, m)
	s := redistest.Sentinel(t, m, 1)
	if err := m.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Replication is asynchronous: make sure the replica has the key.
	if n, err := m.Client().Do(ctx, "WAIT", 1, 2000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT = %d, %v", n, err)
	}
	if a, err := s.MasterAddr(ctx); err != nil || a != m.Addr() {
		t.Fatalf("sentinel names %q, %v; want %s", a, err, m.Addr())
	}

	m.Stop()
	killed := time.Now()
	a, at := s.WaitPromotion(m.Addr(), 15*time.Second)
	if a != r.Addr() {
		t.Fatalf("promoted %s, want the replica %s", a, r.Addr())
	}
	t.Logf("replica promoted %v after the kill", at.Sub(killed).Round(time.Millisecond))
	if got, err := r.Client().Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("promoted replica lost the data: %q, %v", got, err)
	}

	// The old master comes back as it was configured: a master, empty. (The
	// Sentinel demotes it within its 10 s INFO period; integration tests
	// check that.)
	m.Start()
	if role := m.Role(ctx); role != "master" {
		t.Errorf("old master back as %q, want master", role)
	}
	if n, err := m.Client().DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("old master back with %d keys, %v; want empty", n, err)
	}
}

func TestClusterWithReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("six nodes: the full run starts them (and the topology tests of integration use them)")
	}
	t.Parallel()
	ctx := context.Background()
	cl := redistest.ClusterWithReplicas(t)
	if n := len(cl.Nodes()); n != 6 {
		t.Fatalf("%d nodes, want 6", n)
	}
	old := cl.MasterOf(ctx, "{k}")
	if old == nil || old.Role(ctx) != "master" {
		t.Fatal("no master for {k}")
	}
	old.Stop()
	killed := time.Now()
	m, at := cl.WaitNewMaster("{k}", old, 20*time.Second)
	t.Logf("%s took over {k} from %s %v after the kill", m.Addr(), old.Addr(), at.Sub(killed).Round(time.Millisecond))
	cl.WaitHealthy(10 * time.Second)
}

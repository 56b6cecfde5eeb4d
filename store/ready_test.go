package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
)

// The slot function agrees with the Redis Cluster specification's vectors.
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{"123456789": 0x31C3 % clusterSlots, "foo": 12182, "": 0} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	tags := slotTags()
	for sl, tag := range tags {
		if keySlot(tag) != sl {
			t.Fatalf("slot %d: tag %q lands in %d", sl, tag, keySlot(tag))
		}
	}
}

// Every reply or transport failure that means "Redis cannot serve now" is
// ErrUnavailable naming its condition; other Redis errors are not.
func TestWrapErrConditions(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string // "" means: not unavailable
	}{
		{proto("READONLY You can't write against a read only replica."), "READONLY"},
		{proto("READONLY You can't write against a read only replica. script: ff96, on @user_script:1."), "READONLY"},
		{proto("OOM command not allowed when used memory > 'maxmemory'."), "OOM"},
		{proto("LOADING Redis is loading the dataset in memory"), "LOADING"},
		{proto("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), "MASTERDOWN"},
		{proto("CLUSTERDOWN The cluster is down"), "CLUSTERDOWN"},
		{proto("TRYAGAIN Multiple keys request during rehashing of slot"), "TRYAGAIN"},
		{proto("NOREPLICAS Not enough good replicas to write."), "NOREPLICAS"},
		{proto("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), "BUSY"},
		{proto("ERR Function not found"), "FUNCTION NOT FOUND"},
		{proto("WRONGPASS invalid username-password pair or user is disabled."), "WRONGPASS"},
		{proto("NOAUTH Authentication required."), "NOAUTH"},
		{proto("ERR Protocol error: unauthenticated multibulk length"), "NOAUTH"},
		{proto("NOPERM User reader has no permissions to run the 'evalsha' command"), "NOPERM"},
		{proto("BUSYKEY Target key name already exists."), ""},
		{proto("ERR wrong number of arguments"), ""},
		{proto("WRONGTYPE Operation against a key holding the wrong kind of value"), ""},
		{context.DeadlineExceeded, "timeout"},
		{redis.ErrPoolTimeout, "timeout"},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, "timeout"},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, "connection refused"},
		{fmt.Errorf("reading: %w", syscall.ECONNRESET), "connection lost"},
		{redis.ErrClosed, "client closed"},
		{errors.New("something else"), "connection failed"},
	} {
		err := wrapErr(c.err)
		var ue *UnavailableError
		switch {
		case c.want == "" && errors.Is(err, ErrUnavailable):
			t.Errorf("%v: unavailable (%v), want a plain error", c.err, err)
		case c.want == "":
		case !errors.Is(err, ErrUnavailable) || !errors.As(err, &ue):
			t.Errorf("%v: %v, want ErrUnavailable", c.err, err)
		case ue.Condition != c.want:
			t.Errorf("%v: condition %q, want %q", c.err, ue.Condition, c.want)
		case !strings.HasPrefix(ue.Describe(), c.want+": "):
			t.Errorf("%v: describe %q", c.err, ue.Describe())
		case wrapErr(err) != err:
			t.Errorf("%v: wrapping twice changed it", c.err)
		}
		// Each condition matches its cause (errors.Is), and no other.
		want := map[string]error{"WRONGPASS": ErrUnauthorized, "NOAUTH": ErrUnauthorized, "NOPERM": ErrUnauthorized,
			"LOADING": ErrLoading, "READONLY": ErrReadOnly}[c.want]
		for _, cause := range []error{ErrUnauthorized, ErrLoading, ErrReadOnly} {
			if errors.Is(err, cause) != (cause == want) {
				t.Errorf("%v: errors.Is(err, %v) = %v", c.err, cause, errors.Is(err, cause))
			}
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// proto is a Redis error reply as go-redis returns it (its type is
// internal): a script's error_reply.
func proto(msg string) error {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	defer rdb.Close()
	return rdb.Eval(context.Background(), "return redis.error_reply(ARGV[1])", nil, msg).Err()
}

// Ready is true on a master and names the condition on a read-only replica
// and at maxmemory, where acquires and puts are 503-class errors too.
func TestReadyConditions(t *testing.T) {
	master := redistest.Server(t)
	replica := redistest.Server(t, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port()))
	ctx := t.Context()
	ms := New(master.Client(), WithPrefix("rdy"))
	if err := ms.Ready(ctx); err != nil {
		t.Fatalf("master: %v", err)
	}
	if _, _, err := ms.Put(ctx, "r", limiter.Config{Rate: 100}); err != nil {
		t.Fatal(err)
	}

	rs := New(replica.Client(), WithPrefix("rdy"))
	wantCond := func(what string, err error, cond string) {
		t.Helper()
		var ue *UnavailableError
		if !errors.As(err, &ue) || ue.Condition != cond {
			t.Errorf("%s: %v, want ErrUnavailable with condition %s", what, err, cond)
		}
	}
	wantCond("replica Ready", rs.Ready(ctx), "READONLY")
	_, err := rs.Acquire(ctx, "r", 1, limitd.Forever)
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("acquire on the replica: %v, want ErrUnavailable", err)
	}
	_, _, err = rs.Put(ctx, "r2", limiter.Config{Rate: 100})
	wantCond("put on the replica", err, "READONLY")

	// maxmemory just above what is used, nothing may be evicted: fill it.
	info := master.Client().InfoMap(ctx, "memory").Item("Memory", "used_memory")
	var used int64
	fmt.Sscan(info, &used)
	rdb := master.Client()
	rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction")
	rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(used+2<<20))
	redistest.FillMemory(t, rdb)
	wantCond("Ready at maxmemory", ms.Ready(ctx), "OOM")
	_, _, err = ms.Put(ctx, "r3", limiter.Config{Rate: 100})
	wantCond("put at maxmemory", err, "OOM")
	rdb.ConfigSet(ctx, "maxmemory", "0")
	if err := ms.Ready(ctx); err != nil {
		t.Errorf("after raising maxmemory: %v", err)
	}
}

// On a cluster, Ready writes on every master and fails when one is gone.
func TestReadyCluster(t *testing.T) {
	cl := redistest.Cluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	s := New(c, WithPrefix("rdy"))
	if err := s.Ready(t.Context()); err != nil {
		t.Fatalf("healthy cluster: %v", err)
	}
	// Every master got a probe key.
	for _, n := range cl.Nodes() {
		keys, err := n.Client().Keys(t.Context(), "rdy:*:ready").Result()
		if err != nil || len(keys) == 0 {
			t.Errorf("node %s: probe keys %v, %v", n.Addr(), keys, err)
		}
	}
	cl.Nodes()[1].Stop()
	start := time.Now()
	err := s.Ready(t.Context())
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("a master down: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 2*ReadyTimeout {
		t.Errorf("Ready took %v with a master down", d)
	}
}

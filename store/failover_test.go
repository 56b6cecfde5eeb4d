package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

func TestTopologyChanged(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{redis.Nil, false},
		{context.Canceled, false},
		{errors.New("ERR Function not found"), false},
		{errors.New("NOSCRIPT No matching script"), false},
		{io.EOF, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}, true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{errors.New("CLUSTERDOWN The cluster is down"), true},
		{errors.New("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{errors.New("READONLY You can't write against a read only replica."), true},
		{errors.New("MASTERDOWN Link with MASTER is down"), true},
		{errors.New("LOADING Redis is loading the dataset in memory"), true},
		{redis.ErrClosed, false},
	} {
		if got := topologyChanged(c.err); got != c.want {
			t.Errorf("topologyChanged(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A hook acts at most once per interval however many commands fail.
func TestFailoverHookRateLimited(t *testing.T) {
	n := 0
	h := &failoverHook{every: time.Hour, when: topologyChanged, act: func() { n++ }}
	for range 100 {
		h.saw(io.EOF)
		h.saw(nil)
	}
	if n != 1 {
		t.Errorf("acted %d times, want once per interval", n)
	}
}

// A master demoted behind the client's back (its Sentinel announcement
// missed) answers READONLY on the connections already open: the client drops
// them and dials again, which for a failover client means asking the
// Sentinels for the master.
func TestFollowDemotionDropsConnections(t *testing.T) {
	ctx := context.Background()
	m := redistest.Server(t)
	r := redistest.Replica(t, m)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, PoolSize: 2})
	defer c.Close()
	conns := followDemotion(c, 0)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n := conns.dials.Load(); n != 1 {
		t.Fatalf("%d dials for one PING", n)
	}
	err := c.Set(ctx, "k", "v", 0).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Fatalf("SET on a replica: %v, want READONLY", err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		// The pool may hand out the closed connection once before
		// noticing; the next command dials.
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.dials.Load(); n != 2 {
		t.Errorf("%d dials after READONLY, want 2: the connection to the demoted node was not dropped", n)
	}
}

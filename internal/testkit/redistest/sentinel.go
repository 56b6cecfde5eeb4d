package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Failover timings of Sentinel: a master that does not answer for
// SentinelDownAfter is down, and a failover that has not finished within
// twice SentinelFailoverTimeout is tried again. Short, so that tests see a
// promotion within about two seconds of a kill.
const (
	SentinelDownAfter       = time.Second
	SentinelFailoverTimeout = 2 * time.Second
	// SentinelMaster is the name Sentinel knows the master by.
	SentinelMaster = "mymaster"
)

// Replica starts a redis-server that replicates master (replicaof) and waits
// until the initial sync is done, so that a failover can promote it at once.
func Replica(t testing.TB, master *Instance, args ...string) *Instance {
	t.Helper()
	Require(t, "redis-server")
	host, port, _ := net.SplitHostPort(master.Addr())
	// Else a master waits 5 s for more replicas before the first sync.
	if err := master.Client().ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatalf("redistest: %s: CONFIG SET repl-diskless-sync-delay: %v", master.Addr(), err)
	}
	r := launch(t, nil, func(string, int) ([]string, error) {
		// Once promoted, it syncs its own replicas at once too.
		return append([]string{"--replicaof", host, port, "--repl-diskless-sync-delay", "0"}, args...), nil
	})
	r.WaitSynced(10 * time.Second)
	return r
}

// WaitSynced waits until a replica's link to its master is up (the initial
// sync done).
func (i *Instance) WaitSynced(within time.Duration) {
	i.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: i.Addr()})
	defer c.Close()
	var last string
	poll(i.t, within, 20*time.Millisecond, func(ctx context.Context) bool {
		info, err := c.Info(ctx, "replication").Result()
		last = fmt.Sprint(info, err)
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, func() string {
		return fmt.Sprintf("%s: INFO replication lacks [master_link_status:up] after %v:\n%s", i.Addr(), within, last)
	})
}

// SentinelInstance is a Redis Sentinel monitoring one master, owned by a test.
type SentinelInstance struct{ *Instance }

// Sentinel starts one redis-server --sentinel on a free 127.0.0.1 port that
// monitors master as SentinelMaster with quorum 1 and the short timings
// above, and waits until it has seen the master and that many replicas.
func Sentinel(t testing.TB, master *Instance, replicas int) *SentinelInstance {
	t.Helper()
	Require(t, "redis-server")
	host, port, _ := net.SplitHostPort(master.Addr())
	setup := func(i *Instance) {
		i.conf = filepath.Join(i.dir, "sentinel.conf")
		i.ready = "Sentinel ID is" // logged once it listens; readyLine never is
		conf := fmt.Sprintf("sentinel monitor %s %s %s 1\n"+
			"sentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s %d\n"+
			"sentinel parallel-syncs %s 1\n",
			SentinelMaster, host, port,
			SentinelMaster, SentinelDownAfter.Milliseconds(),
			SentinelMaster, SentinelFailoverTimeout.Milliseconds(),
			SentinelMaster)
		if err := os.WriteFile(i.conf, []byte(conf), 0o644); err != nil {
			t.Fatalf("redistest: %v", err)
		}
	}
	inst := launch(t, setup, func(string, int) ([]string, error) {
		return []string{"--sentinel"}, nil
	})
	s := &SentinelInstance{inst}
	sc := redis.NewSentinelClient(&redis.Options{Addr: inst.Addr()})
	defer sc.Close()
	var m map[string]string
	var err error
	poll(t, 10*time.Second, 50*time.Millisecond, func(ctx context.Context) bool {
		m, err = sc.Master(ctx, SentinelMaster).Result()
		return err == nil && m["num-slaves"] == strconv.Itoa(replicas) && !strings.Contains(m["flags"], "down")
	}, func() string {
		return fmt.Sprintf("sentinel %s did not see master %s with %d replicas within 10s: %v %v", inst.Addr(), master.Addr(), replicas, m, err)
	})
	return s
}

// MasterName is the name the Sentinel monitors the master by.
func (s *SentinelInstance) MasterName() string { return SentinelMaster }

// URL is the LIMITD_REDIS_URL naming this Sentinel's master, with extra
// query parameters appended ("&client_name=x").
func (s *SentinelInstance) URL(extra string) string {
	return "redis://" + s.Addr() + "?master_name=" + SentinelMaster + extra
}

// MasterAddr asks the Sentinel where the master is now.
func (s *SentinelInstance) MasterAddr(ctx context.Context) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(a[0], a[1]), nil
}

// WaitPromotion waits until the Sentinel names a master other than old and
// that master answers as one (role:master), and returns its address and the
// time the Sentinel's answer changed (as seen by polling every 20 ms).
func (s *SentinelInstance) WaitPromotion(old string, within time.Duration) (addr string, at time.Time) {
	s.t.Helper()
	var err error
	poll(s.t, within, 20*time.Millisecond, func(ctx context.Context) bool {
		if addr, err = s.MasterAddr(ctx); err != nil || addr == old {
			return false
		}
		if at.IsZero() {
			at = time.Now()
		}
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	}, func() string {
		return fmt.Sprintf("no promotion away from %s within %v (last: %q, %v)", old, within, addr, err)
	})
	return addr, at
}

// Role returns the replication role of a server ("master", "slave"), or ""
// when it does not answer.
func (i *Instance) Role(ctx context.Context) string {
	c := redis.NewClient(&redis.Options{Addr: i.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "role:"); ok {
			return v
		}
	}
	return ""
}

// poll calls ok every interval (with a context that ends within from now)
// until it holds, and fails t with what() if it does not within.
func poll(t testing.TB, within, every time.Duration, ok func(ctx context.Context) bool, what func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for !ok(ctx) {
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: %s", what())
		case <-time.After(every):
		}
	}
}

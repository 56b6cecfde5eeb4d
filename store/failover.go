package store

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Following a failover (docs/reliability.md, "Failover in seconds"):
// followCluster reloads a cluster's slot map as soon as a command fails in a
// way a failover explains, at most once per reloadEvery, rather than after
// go-redis' 60 s; followSentinel closes a Sentinel client's connections to a
// master that answers READONLY (a missed +switch-master), at most once per
// dropEvery, so that the next command dials the master the Sentinels name.
const (
	reloadEvery = 200 * time.Millisecond
	dropEvery   = time.Second
)

func followCluster(c *redis.ClusterClient) *redis.ClusterClient {
	h := &failoverHook{
		every: reloadEvery,
		when:  topologyChanged,
		act:   func() { c.ReloadState(context.Background()) },
	}
	c.AddHook(h)
	return c
}

func followSentinel(c *redis.Client) *redis.Client {
	followDemotion(c, dropEvery)
	return c
}

// followDemotion installs followSentinel's hook and returns its connections.
func followDemotion(c *redis.Client, every time.Duration) *connSet {
	conns := &connSet{m: map[*trackedConn]struct{}{}}
	c.AddHook(&failoverHook{every: every, when: demoted, act: conns.closeAll, conns: conns})
	return conns
}

// topologyChanged reports whether err may mean that a cluster's slots moved
// or its node failed.
func topologyChanged(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) ||
		errors.Is(err, redis.ErrClosed) {
		return false
	}
	// (a hung node, DeadlineExceeded, is as good a reason as any to look again)
	if _, ok := errors.AsType[net.Error](err); ok || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	msg := err.Error()
	isCode := func(code string) bool { return strings.HasPrefix(msg, code) }
	return slices.ContainsFunc([]string{"CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING", "READONLY"}, isCode) ||
		strings.Contains(msg, "connection refused") || strings.Contains(msg, "connection reset")
}

func demoted(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "READONLY")
}

// failoverHook calls act when a command's error satisfies when, at most once
// per every. With conns set it also tracks the connections the client dials.
type failoverHook struct {
	every time.Duration
	when  func(error) bool
	act   func()
	conns *connSet
	last  atomic.Int64 // Unix ns of the last act
}

func (h *failoverHook) saw(err error) {
	if !h.when(err) {
		return
	}
	now := time.Now().UnixNano()
	last := h.last.Load()
	if now-last < int64(h.every) || !h.last.CompareAndSwap(last, now) {
		return
	}
	h.act()
}

func (h *failoverHook) DialHook(next redis.DialHook) redis.DialHook {
	if h.conns == nil {
		return next
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return h.conns.add(cn), nil
	}
}

func (h *failoverHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.saw(err)
		return err
	}
}

func (h *failoverHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil {
			for _, c := range cmds {
				if e := c.Err(); h.when(e) {
					h.saw(e)
					break
				}
			}
		}
		return err
	}
}

// connSet is the set of a client's open connections.
type connSet struct {
	mu    sync.Mutex
	m     map[*trackedConn]struct{}
	dials atomic.Int64 // connections made so far (tests)
}

func (s *connSet) add(cn net.Conn) net.Conn {
	t := &trackedConn{Conn: cn, set: s}
	s.dials.Add(1)
	s.mu.Lock()
	s.m[t] = struct{}{}
	s.mu.Unlock()
	return t
}

// closeAll closes every connection: the client dials again on its next use
// of each, asking the Sentinels where the master is.
func (s *connSet) closeAll() {
	s.mu.Lock()
	all := slices.Collect(maps.Keys(s.m))
	s.mu.Unlock()
	for _, c := range all {
		_ = c.Close()
	}
}

// trackedConn leaves its set when closed.
type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.m, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

// NetConn lets go-redis' connection health check reach the socket.
func (c *trackedConn) NetConn() net.Conn { return c.Conn }

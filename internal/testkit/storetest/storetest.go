// Package storetest opens a store over a Redis of the test's own, for the
// tests of the packages above store.
package storetest

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/store"
)

// Mini starts a miniredis and returns a store over a client of it (opts
// change the client's options, as for redistest.Mini): enough wherever
// timing does not matter.
func Mini(t testing.TB, opts ...func(*redis.Options)) (*miniredis.Miniredis, *redis.Client, *store.Store) {
	t.Helper()
	m, rdb := redistest.Mini(t, opts...)
	return m, rdb, store.New(rdb)
}

// Server starts a private redis-server (never port 6379) and returns a
// store over a client with short timeouts, so that a stopped server is
// noticed quickly. The caller may close rdb early (before goleak checks).
func Server(t testing.TB) (*redistest.Instance, *redis.Client, *store.Store) {
	t.Helper()
	srv, rdb := redistest.ShortClient(t)
	return srv, rdb, store.New(rdb)
}

// Package redisclient is the Go client's transport over Redis, through a
// store.Store. It lives apart from package client so that a program that
// reaches limitd over HTTP compiles neither go-redis nor the Lua scripts.
//
// New takes any redis.UniversalClient. Build it with store.NewClient, which
// reads every topology from one URL (the forms of LIMITD_REDIS_URL), sets
// short timeouts and follows failovers within a second. For example:
//
//	rdb, err := store.NewClient(os.Getenv("LIMITD_REDIS_URL"))
//	if err != nil {
//		return err // names the bad part, never the password
//	}
//	defer rdb.Close()
//	c := redisclient.New(rdb)
//
// A client built by hand works too, but keeps go-redis' defaults: 5 s
// timeouts, and on a cluster a slot map reloaded only every minute.
package redisclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/store"
)

// New returns a client that reaches the shared schedules through Redis,
// under limitd's default key prefix. The caller keeps ownership of rdb.
// The client adds what it refuses to the Redis totals a limitd server's
// ledger writes (see package client); client.WithoutRefusalCounts turns it
// off.
func New(rdb redis.UniversalClient, opts ...client.ClientOption) *client.Client {
	return NewWithStore(store.New(rdb), opts...)
}

// NewWithStore is New over a store the caller made and keeps (the client
// does not close it): for another key prefix (store.WithPrefix), or to
// share one store.
func NewWithStore(st *store.Store, opts ...client.ClientOption) *client.Client {
	tally := func(now func() time.Time) client.RefusalTally {
		return refusalTally{st: st, Tally: st.NewTally(store.TallyOptions{Clock: now})}
	}
	return client.NewWithTransport(transport{st}, append([]client.ClientOption{client.WithRefusalCounts(tally)}, opts...)...)
}

// NewTransport returns the client.Transport New uses, over a store the
// caller keeps, for wrapping; a client.NewWithTransport over it counts no
// refusals.
func NewTransport(st *store.Store) client.Transport { return transport{st} }

// transport talks to Redis through a store, whose methods are the
// Transport's where their signatures agree (Grant, Capacity, the slots,
// Changes, and Acquire and Charge besides); it takes several limiters at
// once too.
type transport struct{ *store.Store }

var _ client.Transport = transport{}

func (t transport) Release(ctx context.Context, g limitd.Grant, m int64) error {
	_, err := t.Store.Release(ctx, g, m)
	return err
}

func (t transport) Time(ctx context.Context) (int64, error) {
	now, err := t.Client().Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return now.UnixNano(), nil
}

func (t transport) AcquireAll(ctx context.Context, reqs []client.Permits, maxWait time.Duration) (client.AllResult, error) {
	mr := make([]limitd.MultiRequest, len(reqs))
	for i, r := range reqs {
		mr[i] = limitd.MultiRequest{Name: r.Name, Permits: r.Permits}
	}
	md, err := t.Store.AcquireAll(ctx, mr, maxWait)
	if err != nil {
		return client.AllResult{}, err
	}
	return client.AllResult{Granted: md.Granted, Decisions: md.Decisions}, nil
}

// refusalTally adds a client's refusals to Redis through the same
// store.Tally a server's ledger writes with, under the same bounds.
type refusalTally struct {
	st *store.Store
	*store.Tally
}

// Subject names what name's refusals count under (see core's ledger): the
// limiter, or the template whose instance it is. The template's id comes
// from the store's cache of templates; a name no decision told about yet
// costs a lookup.
func (t refusalTally) Subject(ctx context.Context, name string, instance bool) (limitd.Subject, bool) {
	tpl, err := t.st.Resolve(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound) && instance:
		return limitd.Subject{}, true // its template was deleted since: nothing to count under
	case errors.Is(err, store.ErrNotFound):
		return limitd.Subject{Limiter: name}, true // no template matches: only a limiter could have refused
	case err != nil:
		return limitd.Subject{}, false
	case instance:
		return limitd.Subject{Template: tpl.ID, Instance: name}, true
	}
	// A limiter of that name comes before templates.
	if _, err := t.st.Get(ctx, name); err == nil {
		return limitd.Subject{Limiter: name}, true
	} else if !errors.Is(err, store.ErrNotFound) {
		return limitd.Subject{}, false
	}
	return limitd.Subject{Template: tpl.ID, Instance: name}, true
}

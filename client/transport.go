package client

import (
	"context"
	"fmt"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/store"
)

// Transport is how a Client reaches the shared schedule: Redis directly
// (New) or a limitd server over HTTP (NewHTTP).
type Transport interface {
	// Grant takes k permits from the named limiter's schedule, waiting at most
	// maxWait for the first one.
	Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error)
	// Release hands back the last m permits of g.
	Release(ctx context.Context, g limitd.Grant, m int64) error
	// Changes delivers "<name> <version>" config changes until ctx is done.
	// A transport without change events returns a nil channel.
	Changes(ctx context.Context) <-chan string

	// Capacity asks a share limiter for a lease of its capacity (Share).
	Capacity(ctx context.Context, name string, r limitd.CapacityRequest) (limitd.CapacityLease, error)
	// ReturnCapacity ends a client's lease on a share limiter at once.
	ReturnCapacity(ctx context.Context, name, clientID string) error
	// AcquireSlot takes a slot of a concurrency limiter if one is free
	// (Semaphore); a full limiter is not an error but a lease not Granted.
	AcquireSlot(ctx context.Context, name string) (limitd.SlotLease, error)
	// RenewSlot extends a held slot's lease; limiter.ErrNotFound once it is lost.
	RenewSlot(ctx context.Context, name, id string) (limitd.SlotLease, error)
	// ReleaseSlot frees a held slot; limiter.ErrNotFound when it is not held.
	ReleaseSlot(ctx context.Context, name, id string) error
	// Time is the Redis clock now, Unix ns: leases expire on that clock, and
	// a round trip to it estimates its offset from the local clock.
	Time(ctx context.Context) (int64, error)
}

// NewStoreTransport returns the Transport New uses, over a store the caller
// made (and keeps: the transport does not close it). It is for wrapping the
// Redis transport, in tests for instance, or for sharing one store.
func NewStoreTransport(st *store.Store) Transport { return redisTransport{st: st} }

// redisTransport talks to Redis through a store.
type redisTransport struct{ st *store.Store }

func (t redisTransport) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	return t.st.Grant(ctx, name, k, maxWait)
}

func (t redisTransport) Release(ctx context.Context, g limitd.Grant, m int64) error {
	_, err := t.st.Release(ctx, g, m)
	return err
}

func (t redisTransport) Capacity(ctx context.Context, name string, r limitd.CapacityRequest) (limitd.CapacityLease, error) {
	return t.st.Capacity(ctx, name, r)
}

func (t redisTransport) ReturnCapacity(ctx context.Context, name, clientID string) error {
	return t.st.ReturnCapacity(ctx, name, clientID)
}

func (t redisTransport) AcquireSlot(ctx context.Context, name string) (limitd.SlotLease, error) {
	return t.st.AcquireSlot(ctx, name)
}

func (t redisTransport) RenewSlot(ctx context.Context, name, id string) (limitd.SlotLease, error) {
	return t.st.RenewSlot(ctx, name, id)
}

func (t redisTransport) ReleaseSlot(ctx context.Context, name, id string) error {
	return t.st.ReleaseSlot(ctx, name, id)
}

func (t redisTransport) Time(ctx context.Context) (int64, error) {
	now, err := t.st.Client().Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return now.UnixNano(), nil
}

func (t redisTransport) Changes(ctx context.Context) <-chan string { return t.st.Changes(ctx) }

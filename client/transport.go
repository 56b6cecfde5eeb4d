package client

import (
	"context"
	"time"

	"github.com/limitd/limitd"
)

// Transport is how a Client reaches the shared schedule: a limitd server
// over HTTP (NewHTTP) or Redis directly (package redisclient, apart so that
// a client over HTTP compiles no Redis). A Transport may also take direct
// acquires (Client.Acquire), several limiters at once (Client.AcquireAll)
// and charges (Limiter.Charge): both of limitd's do.
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

// RefusalTally is where a client adds what it refused: the Redis totals a
// limitd server's ledger writes (package redisclient's).
type RefusalTally interface {
	// Subject names what name's refusals count under: the limiter, or the
	// template whose instance it is (instance: a decision said name is
	// one; false: no decision said what name is). ok is false when it
	// could not be learned now: the next flush asks again.
	Subject(ctx context.Context, name string, instance bool) (s limitd.Subject, ok bool)
	// Add adds c to what s counts.
	Add(s limitd.Subject, c limitd.Counts)
	// Flush writes what was added since the last flush.
	Flush(ctx context.Context) error
}

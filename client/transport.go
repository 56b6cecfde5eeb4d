package client

import (
	"context"
	"time"

	"github.com/limitd/limitd/store"
)

// Transport is how a Client reaches the shared schedule: Redis directly
// (New) or a limitd server over HTTP (NewHTTP).
type Transport interface {
	// Grant takes k permits from the named limiter's schedule, waiting at most
	// maxWait for the first one.
	Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (store.Grant, error)
	// Release hands back the last m permits of g.
	Release(ctx context.Context, g store.Grant, m int64) error
	// Changes delivers "<name> <version>" config changes until ctx is done.
	// A transport without change events returns a nil channel.
	Changes(ctx context.Context) <-chan string
}

// NewStoreTransport returns the Transport New uses, over a store the caller
// made (and keeps: the transport does not close it). It is for wrapping the
// Redis transport, in tests for instance, or for sharing one store.
func NewStoreTransport(st *store.Store) Transport { return redisTransport{st: st} }

// redisTransport talks to Redis through a store.
type redisTransport struct{ st *store.Store }

func (t redisTransport) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (store.Grant, error) {
	return t.st.Grant(ctx, name, k, maxWait)
}

func (t redisTransport) Release(ctx context.Context, g store.Grant, m int64) error {
	_, err := t.st.Release(ctx, g, m)
	return err
}

func (t redisTransport) Changes(ctx context.Context) <-chan string {
	sub := t.st.Client().Subscribe(ctx, t.st.Channel())
	out := make(chan string, 16)
	go func() {
		defer close(out)
		defer sub.Close()
		ch := sub.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-ch:
				if !ok {
					return
				}
				select {
				case out <- m.Payload:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

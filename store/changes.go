package store

import "context"

// Changes delivers the change events published on Channel ("<name>
// <version>": a limiter put or patched, version 0 when deleted; "*template*
// 0": the templates changed) until ctx ends, and then closes. Events
// published while the subscription is down are lost, so a watcher that must
// not miss one also reads the state now and then.
func (s *Store) Changes(ctx context.Context) <-chan string {
	sub := s.rdb.Subscribe(ctx, s.Channel())
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

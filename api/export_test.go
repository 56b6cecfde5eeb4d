package api

import "time"

// Hooks for the package's external tests.

// StreamBuffer is how many items an event stream may fall behind.
const StreamBuffer = streamBuffer

// SetEventTicker makes h's event streams follow tick: each value sent on it
// is one round of the shared sampling loop (one every 100 ms otherwise). Set
// it before the first stream opens.
func SetEventTicker(h *Handler, tick <-chan time.Time) {
	h.s.hub.newTicker = func(time.Duration) ticker { return chanTicker(tick) }
}

type chanTicker <-chan time.Time

func (c chanTicker) C() <-chan time.Time { return c }
func (chanTicker) Stop()                 {}

// EventLoopRunning reports whether h's shared sampling loop runs.
func EventLoopRunning(h *Handler) bool {
	h.s.hub.mu.Lock()
	defer h.s.hub.mu.Unlock()
	return h.s.hub.running
}

// OpenEventStreams is how many event streams h has open.
func OpenEventStreams(h *Handler) int {
	h.s.hub.mu.Lock()
	defer h.s.hub.mu.Unlock()
	return len(h.s.hub.streams)
}

// SetSignalTicker makes h's signals sampler (Run) follow tick: each value
// sent on it is one round (one a second otherwise). Set it before Run.
func SetSignalTicker(h *Handler, tick <-chan time.Time) {
	h.s.sig.newTicker = func(time.Duration) ticker { return chanTicker(tick) }
}

// SignalRounds is how many rounds h's signals sampler finished.
func SignalRounds(h *Handler) uint64 {
	h.s.sig.mu.Lock()
	defer h.s.sig.mu.Unlock()
	return h.s.sig.rounds
}

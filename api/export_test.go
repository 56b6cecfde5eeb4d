package api

import (
	"time"

	"github.com/limitd/limitd/core"
)

// Hooks for the package's external tests.

// StreamBuffer is how many items an event stream may fall behind.
const StreamBuffer = streamBuffer

type chanTicker <-chan time.Time

func (c chanTicker) C() <-chan time.Time { return c }
func (chanTicker) Stop()                 {}

// EventLoopRunning reports whether h's event hub runs its config
// subscription (while a stream is open).
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

// SetSignalTicker makes h's sampler (Run) follow tick: each value sent on
// it is one round (one a second otherwise). Set it before Run.
func SetSignalTicker(h *Handler, tick <-chan time.Time) {
	h.s.sig.w = h.s.core.NewWatcher(core.WatcherOptions{Step: signalStep, Timeout: h.s.timeout,
		Ticker: func(time.Duration) core.Ticker { return chanTicker(tick) }})
}

// SignalRounds is how many rounds of h's sampler were handed on, partial
// ones (names just watched) included.
func SignalRounds(h *Handler) uint64 {
	h.s.sig.mu.Lock()
	defer h.s.sig.mu.Unlock()
	return h.s.sig.rounds
}

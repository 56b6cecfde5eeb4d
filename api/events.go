package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/wire"
)

// The event streams' route, and their hub's settings, fixed on purpose as
// the server's other timeouts.
const (
	// eventsPath is the route of the event stream (no request timeout).
	eventsPath = "/v1/events"

	defaultEventInterval = time.Second
	minEventInterval     = 100 * time.Millisecond
	maxEventInterval     = time.Minute
	// maxEventLimiters bounds the limiters a stream that watches every
	// limiter is sent (the first in name order).
	maxEventLimiters = 200
	// keepAlive is how often a quiet stream sends a comment, for proxies.
	keepAlive = 15 * time.Second
	// DefaultMaxEventStreams is Options.MaxEventStreams's default.
	DefaultMaxEventStreams = 256
	// streamBuffer is how many items (a sample, a config change) a stream
	// may fall behind the hub before the hub drops it.
	streamBuffer = 64
	// streamWriteTimeout bounds one write to a stream's client.
	streamWriteTimeout = 10 * time.Second
	// streamsFullRetry is the Retry-After of a stream refused at the cap.
	streamsFullRetry = 10 * time.Second
)

// events streams Server-Sent Events, as openapi.yaml's /v1/events says,
// from the handler's eventHub; past Options.MaxEventStreams open streams it
// is a 503.
func (s *server) events(c echo.Context) error {
	q := c.QueryParams()
	interval := defaultEventInterval
	if v := q.Get("interval"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < minEventInterval || d > maxEventInterval {
			return invalid("interval", fmt.Sprintf("interval: must be a duration from %v to %v (got %s)", minEventInterval, maxEventInterval, quote(v)))
		}
		interval = d
	}
	var names []string // nil: every limiter
	if q.Has("limiters") {
		var err error
		if names, err = limiterNames(q.Get("limiters")); err != nil {
			return err
		}
	}
	st := newStream(names, interval)
	hasStatus, err := s.hub.join(st)
	if err != nil {
		return err
	}
	defer s.hub.leave(st)
	ctx := c.Request().Context()

	w := c.Response()
	rc := http.NewResponseController(w)
	// The server's read timeout would end the stream (net/http cancels a
	// request whose connection's read deadline passes).
	_ = rc.SetReadDeadline(time.Time{})
	// Each write sets its own deadline; none outlasts the request, since
	// the connection may serve another after it.
	defer func() {
		st.writing(nil)
		_ = rc.SetWriteDeadline(time.Time{})
	}()
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)

	var buf []byte
	slow := false // the client did not read: dropped
	defer func() {
		if slow {
			s.m.eventStreamsDropped.Inc()
			s.log.Info("event stream dropped: its client does not read", "request_id", requestID(c))
		}
	}()
	// write sends b whole within streamWriteTimeout, and reports whether it did.
	stop := func() { _ = rc.SetWriteDeadline(time.Now()) }
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if !st.writing(stop) {
			slow = true // dropped since the last write
			return false
		}
		_, err := w.Write(b)
		if err == nil {
			err = rc.Flush()
		}
		slow = errors.Is(err, os.ErrDeadlineExceeded)
		return err == nil
	}
	take := func(it streamItem) {
		switch {
		case it.err != nil: // its first sample failed: the hub ends it
			buf = append(buf, encodeEvent("error", s.problemOf(it.err, nil).Problem)...)
		case it.round != nil:
			buf = st.appendRound(buf, it.round)
		default:
			buf = append(buf, it.change...)
		}
	}
	// The headers go out at once, then the status: the sampler's last, or
	// one worked out now.
	if !write(nil) {
		return nil
	}
	if !hasStatus {
		if !write(encodeEvent("status", s.sig.probe(ctx))) {
			return nil
		}
	}
	quiet := time.NewTimer(keepAlive)
	defer quiet.Stop()
	for {
		ended := false
	drain: // whatever else is waiting goes out in the same write
		for {
			select {
			case it, ok := <-st.out:
				if !ok {
					ended = true
					break drain
				}
				take(it)
			default:
				break drain
			}
		}
		if ended && st.dropped { // the hub's buffer for it is full
			slow = true
			return nil
		}
		if len(buf) > 0 {
			if !write(buf) {
				return nil
			}
			buf = buf[:0]
			quiet.Reset(keepAlive)
		}
		if ended {
			return nil // the server shuts down
		}
		select {
		case <-ctx.Done():
			return nil
		case it, ok := <-st.out:
			if !ok {
				slow = st.dropped
				return nil
			}
			take(it)
		case <-quiet.C:
			if !write([]byte(": keep-alive\n\n")) {
				return nil
			}
			quiet.Reset(keepAlive)
		}
	}
}

// limiterNames reads a limiters parameter: 1 to maxEventLimiters names,
// comma-separated, each once.
func limiterNames(v string) ([]string, error) {
	names := []string{}
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if err := limitd.CheckNameAs("limiters", n); err != nil {
			return nil, err
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 || len(names) > maxEventLimiters {
		return nil, invalid("limiters", fmt.Sprintf("limiters: must name from 1 to %d limiters, comma-separated (got %d)", maxEventLimiters, len(names)))
	}
	return names, nil
}

// history answers GET /v1/history?limiters=a,b: each limiter's signals,
// oldest first, as Handler.Run sampled them, from this limitd's memory (no
// Redis call). A limiter not sampled has an empty list.
func (s *server) history(c echo.Context) error {
	names, err := limiterNames(c.QueryParam("limiters"))
	if err != nil {
		return err
	}
	h := s.sig.w.History(names)
	out := make(map[string][]wire.Signals, len(h))
	for n, ss := range h {
		out[n] = make([]wire.Signals, len(ss))
		for i, x := range ss {
			out[n][i] = historyOf(x)
		}
	}
	return c.JSON(http.StatusOK, wire.History{Step: int64(signalStep), Limiters: out})
}

// eventHub is what every event stream of one handler shares: one
// subscription to config changes, and the rounds of the process's one
// sampler (core.Watcher, run by Handler.Run). A stream watches some
// limiters (or all) every whole number of rounds; the hub encodes each
// limiter's event once a round and hands every due stream the same encoded
// round, so N streams cost Redis what one does.
//
// The config subscription runs while a stream is open; close (the handler's
// Close) stops it for good and ends every stream. A stream that falls
// streamBuffer items behind is dropped (hand).
type eventHub struct {
	sig     *signals // the process's one sampler: its rounds are the samples
	m       *metrics
	max     int
	problem func(error) *problem // what a sample's error reads as

	ctx     context.Context // ends with close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the loop
	closing sync.Once

	mu      sync.Mutex
	status  []byte      // the last status event, nil before the first
	last    *core.Round // the sampler's last round, nil before the first
	streams map[*stream]struct{}
	running bool          // a loop is running; it clears this as it stops
	closed  bool          // close was called: no stream joins again
	wake    chan struct{} // a stream joined or left (capacity 1)
}

func newEventHub(s *server, max int) *eventHub {
	if max <= 0 {
		max = DefaultMaxEventStreams
	}
	h := &eventHub{
		sig: s.sig, m: s.m, max: max,
		problem: func(err error) *problem { return s.problemOf(err, nil) },
		streams: map[*stream]struct{}{},
		wake:    make(chan struct{}, 1),
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// stream is one client's view of the hub.
type stream struct {
	names []string // the limiters watched (at most maxEventLimiters), in the order asked; nil: every limiter
	every uint64   // rounds between samples: its interval over the sampler's step
	// unwatch takes back the names it asked the sampler for.
	unwatch func()
	out     chan streamItem // the hub's items; closed when the hub ends the stream
	// dropped is set before out is closed when the stream fell behind.
	dropped bool

	// writer is how the hub ends a write its client does not read (set by
	// the stream's handler while it writes; nil once it returned); kicked
	// says it was.
	wmu    sync.Mutex
	writer func()
	kicked bool

	// The loop's, under the hub's mu.
	started bool // had its first sample
}

// streamItem is one thing the hub hands a stream: a round's sample, an
// encoded config change, or why its first sample could not be taken.
type streamItem struct {
	round  *eventRound
	change []byte
	err    error
}

// eventRound is one round's sample, shared by streams and never changed.
type eventRound struct {
	all    []string // every limiter (the first maxEventLimiters in name order), for streams that watch them all
	events map[string]sampled
}

// sampled is one limiter's part of a round, its event encoded once.
type sampled struct {
	kind sampleKind
	ev   []byte // the SSE event: "state", "config" (gone) or "error"
}

type sampleKind uint8

const (
	sampleState sampleKind = iota
	sampleGone             // deleted: a "config" event with version 0
	sampleSkip             // its state only a newer limitd reads: nothing to send
	sampleError            // Redis could not answer: an "error" event, the rest of the sample left out
)

// newStream is a stream of names (nil: every limiter) every interval,
// rounded up to whole rounds.
func newStream(names []string, interval time.Duration) *stream {
	return &stream{names: names, out: make(chan streamItem, streamBuffer),
		every: max(1, uint64((interval+signalStep-1)/signalStep))}
}

// join adds st to the hub, starting the loop if none runs, and asks the
// sampler for the limiters st names; st first gets the last status (status:
// whether there was one), then the sampler's last round if it read them,
// else the next. Past the cap, or once the hub is closed, it is a 503.
func (h *eventHub) join(st *stream) (status bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return false, newProblem(http.StatusServiceUnavailable, wire.ProblemShuttingDown, "this limitd is shutting down; connect again")
	case len(h.streams) >= h.max:
		p := newProblem(http.StatusServiceUnavailable, wire.ProblemTooManyStreams,
			fmt.Sprintf("this limitd has %d event streams open, its limit (LIMITD_EVENTS_MAX_STREAMS); retry later, or close another stream", h.max))
		p.retryAfter = strconv.Itoa(int(streamsFullRetry / time.Second))
		return false, p
	}
	h.streams[st] = struct{}{}
	h.m.eventStreams.Inc()
	if h.status != nil {
		st.out <- streamItem{change: h.status} // its channel is empty
		status = true
	}
	if !h.running {
		h.running = true
		h.wg.Add(1)
		go h.loop()
	}
	if st.names != nil {
		st.unwatch = h.sig.w.Watch(st.names) // read at once when not sampled yet
	}
	if h.last != nil {
		h.handRound(h.last, st) // the last round, when it read what st watches
	}
	return status, nil
}

// setStatus hands st to every stream, and first to each that joins later.
func (h *eventHub) setStatus(st wire.StreamStatus) {
	ev := encodeEvent("status", st)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.status = ev
	for s := range h.streams {
		h.hand(s, streamItem{change: ev})
	}
}

// leave removes st (if the hub has not dropped it already). The loop stops
// at once when st was the last.
func (h *eventHub) leave(st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.streams[st]; !ok {
		return
	}
	h.remove(st)
	if len(h.streams) == 0 {
		select { // wake the loop
		case h.wake <- struct{}{}:
		default:
		}
	}
}

// close ends every stream and stops the loop for good; later streams are
// refused. A second call returns once the first has.
func (h *eventHub) close() {
	h.closing.Do(func() {
		h.mu.Lock()
		h.closed = true
		h.mu.Unlock()
		h.cancel()
		h.wg.Wait()
		h.mu.Lock()
		defer h.mu.Unlock()
		for st := range h.streams {
			h.end(st)
		}
	})
}

// end removes st and closes its channel (h.mu held).
func (h *eventHub) end(st *stream) {
	h.remove(st)
	close(st.out)
}

// remove takes st out of the hub and the sampler (h.mu held).
func (h *eventHub) remove(st *stream) {
	delete(h.streams, st)
	h.m.eventStreams.Dec()
	if st.unwatch != nil {
		st.unwatch()
	}
}

// hand gives st an item, dropping st when it is streamBuffer items behind
// (h.mu held): its channel is closed and a write blocked on its client
// ended; its handler counts it in limitd_event_streams_dropped_total.
func (h *eventHub) hand(st *stream, it streamItem) {
	select {
	case st.out <- it:
	default:
		st.dropped = true // the stream's handler counts and logs it
		h.end(st)
		st.kick()
	}
}

// kick ends the write the stream's handler is blocked in, if any, and
// every later one: its client is not reading.
func (st *stream) kick() {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	st.kicked = true
	if st.writer != nil {
		st.writer()
	}
}

// writing sets what kick calls (nil: nothing, the handler returned) and
// reports false once the stream was kicked.
func (st *stream) writing(stop func()) bool {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	st.writer = stop
	return !st.kicked
}

// loop is the hub's subscription to config changes, which it tells the
// streams as they come. It ends when no stream is left or the hub closes.
func (h *eventHub) loop() {
	defer h.wg.Done()
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	changes, unsubscribe := h.sig.w.Changes()
	defer unsubscribe()
	for {
		select {
		case <-ctx.Done():
			h.mu.Lock()
			h.running = false // closed: no loop starts again
			h.mu.Unlock()
			return
		case ch := <-changes:
			h.changed(ch)
		case <-h.wake:
			h.mu.Lock()
			if len(h.streams) == 0 {
				h.running = false // a stream joining now starts a new loop
				h.mu.Unlock()
				return
			}
			h.mu.Unlock()
		}
	}
}

// changed tells a config change to every started stream that watches it.
func (h *eventHub) changed(ch core.Change) {
	ev := encodeEvent("config", ch)
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range h.streams {
		if !st.started {
			continue // its first sample comes after the change
		}
		if st.names != nil && !ch.Templates && !slices.Contains(st.names, ch.Limiter) {
			continue
		}
		h.hand(st, streamItem{change: ev})
	}
}

// onRound hands a round of the sampler to the streams due: those whose
// interval a full round completes, and those that have had no sample yet
// and whose limiters it has read.
func (h *eventHub) onRound(r *core.Round) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = r
	h.handRound(r, nil)
}

// handRound hands r to the streams due (only to only when not nil; h.mu held).
func (h *eventHub) handRound(r *core.Round, only *stream) {
	var er *eventRound
	for st := range h.streams {
		if only != nil && st != only {
			continue
		}
		due := st.started && r.Full && r.N%st.every == 0
		if !st.started {
			due = st.covered(r)
		}
		if !due {
			continue
		}
		if st.names == nil && r.Listed == nil {
			if r.Err != nil {
				h.hand(st, streamItem{err: r.Err}) // its answer is the error
				if _, ok := h.streams[st]; ok {
					h.end(st)
				}
			}
			continue
		}
		if er == nil {
			er = h.encodeRound(r)
		}
		st.started = true
		h.hand(st, streamItem{round: er})
	}
}

// covered reports whether r read every limiter st watches.
func (st *stream) covered(r *core.Round) bool {
	if st.names == nil {
		return r.Listed != nil || r.Err != nil
	}
	for _, n := range st.names {
		if _, ok := r.Entries[n]; !ok {
			return false
		}
	}
	return true
}

// encodeRound is r's events, each limiter's encoded once.
func (h *eventHub) encodeRound(r *core.Round) *eventRound {
	all := r.Listed
	if len(all) > maxEventLimiters {
		all = all[:maxEventLimiters]
	}
	er := &eventRound{all: all, events: make(map[string]sampled, len(r.Entries))}
	for n, e := range r.Entries {
		er.events[n] = h.encode(n, e)
	}
	return er
}

// encode is name's part of a round: the event its sample reads as.
func (h *eventHub) encode(name string, e core.Entry) sampled {
	switch err := e.Err; {
	case errors.Is(err, core.ErrNotFound):
		return sampled{kind: sampleGone, ev: encodeEvent("config", core.Change{Limiter: name})}
	case unknownLayout(err):
		// Its state only a newer limitd reads (its own API calls answer 503
		// saying so): the others are still sampled.
		return sampled{kind: sampleSkip}
	case err != nil:
		return sampled{kind: sampleError, ev: encodeEvent("error", h.problem(err).Problem)}
	}
	sg := signalsOf(e.Signals)
	return sampled{kind: sampleState, ev: encodeEvent("state", wire.LimiterEvent{Limiter: viewOf(e.Limiter), Signals: &sg})}
}

// encodeEvent is one Server-Sent Event: its name and v as JSON.
func encodeEvent(name string, v any) []byte {
	b, _ := json.Marshal(v) // wire bodies always encode
	return append(append([]byte("event: "+name+"\ndata: "), b...), "\n\n"...)
}

// appendRound appends r's events for st: each of its limiters' in the
// order it watches them, up to the first error.
func (st *stream) appendRound(b []byte, r *eventRound) []byte {
	names := st.names
	if names == nil {
		names = r.all
	}
	for _, n := range names {
		e, ok := r.events[n]
		if !ok || e.kind == sampleSkip {
			continue
		}
		b = append(b, e.ev...)
		if e.kind == sampleError {
			break // Redis down: the client hears it once, and the next round tries again
		}
	}
	return b
}

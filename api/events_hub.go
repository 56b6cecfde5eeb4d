package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/wire"
)

// Settings of the event hub. They are fixed on purpose, as the server's
// other timeouts: one clear default beats a knob nobody measured.
const (
	// DefaultMaxEventStreams is how many event streams one handler keeps
	// open at most when Options.MaxEventStreams is 0.
	DefaultMaxEventStreams = 256
	// streamBuffer is how many items (a sample, a config change) a stream
	// may fall behind the hub before the hub drops it: its client does not
	// read, or reads slower than the samples come.
	streamBuffer = 64
	// streamWriteTimeout bounds one write to a stream's client: a client
	// that stops reading is dropped once the socket's buffers are full and
	// this has passed.
	streamWriteTimeout = 10 * time.Second
	// streamsFullRetry is the Retry-After of a stream refused at the cap.
	streamsFullRetry = 10 * time.Second
	// sampleBatch bounds the limiters one pipeline of a round reads, so that
	// a round over many streams' distinct limiters does not hold Redis for
	// one long pipeline.
	sampleBatch = 500
)

// eventHub is what every event stream of one handler shares: one
// subscription to config changes and one sampling loop. A stream is a
// reader of the hub's samples: it says which limiters it watches (or every
// limiter) and how often (a whole number of the hub's rounds, one every
// minEventInterval); each round the loop reads the union of what the
// streams due then watch, once, in pipelines (core.Sampler), encodes each
// limiter's event once, and hands every due stream the same encoded round.
// So the Redis cost of N streams watching the same limiters is that of one.
//
// The loop runs while a stream is open: the first stream starts it, and it
// stops when the last one leaves. close (the handler's Close) stops it for
// good and ends every stream. A stream that falls streamBuffer items behind
// is dropped: its channel is closed, a write blocked on its client ended,
// and its handler counts it in limitd_event_streams_dropped_total.
type eventHub struct {
	svc       *core.Service
	m         *metrics
	max       int
	timeout   time.Duration        // bounds one round's reads
	problem   func(error) *problem // what a sample's error reads as
	newTicker func(time.Duration) ticker

	ctx     context.Context // ends with close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the loop
	closing sync.Once

	// signals is what each state event adds: the limiter's last signals.
	signals *signals

	mu      sync.Mutex
	status  []byte // the last status event, nil before the first
	streams map[*stream]struct{}
	running bool          // a loop is running; it clears this as it stops
	closed  bool          // close was called: no stream joins again
	wake    chan struct{} // a stream joined or left (capacity 1)
}

// ticker is what the loop's rounds follow: a time.Ticker, or in tests a
// channel they drive.
type ticker interface {
	C() <-chan time.Time
	Stop()
}

type timeTicker struct{ t *time.Ticker }

func (t timeTicker) C() <-chan time.Time { return t.t.C }
func (t timeTicker) Stop()               { t.t.Stop() }

func newTimeTicker(d time.Duration) ticker { return timeTicker{time.NewTicker(d)} }

func newEventHub(s *server, max int) *eventHub {
	if max <= 0 {
		max = DefaultMaxEventStreams
	}
	h := &eventHub{
		svc: s.core, m: s.m, max: max, timeout: s.timeout, signals: s.sig,
		problem:   func(err error) *problem { return s.problemOf(err, nil) },
		newTicker: newTimeTicker,
		streams:   map[*stream]struct{}{},
		wake:      make(chan struct{}, 1),
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// stream is one client's view of the hub.
type stream struct {
	names []string            // the limiters watched, in the order asked; nil: every limiter
	watch map[string]struct{} // names as a set; nil: every limiter
	every uint64              // rounds between samples: its interval over the hub's
	out   chan streamItem     // the hub's items; closed when the hub ends the stream
	// dropped is set before out is closed when the stream fell
	// streamBuffer items behind.
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

// eventRound is one round's sample, shared by every stream it was handed to
// and never changed after.
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
	st := &stream{names: names, out: make(chan streamItem, streamBuffer)}
	st.every = uint64((interval + minEventInterval - 1) / minEventInterval)
	if names != nil {
		st.watch = make(map[string]struct{}, len(names))
		for _, n := range names {
			st.watch[n] = struct{}{}
		}
	}
	return st
}

// join adds st to the hub, starting the loop if none runs; its first sample
// comes at once, after the last status when there was one (status: false
// when none was handed). Past the cap, or once the hub is closed, it is a
// 503.
func (h *eventHub) join(st *stream) (status bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return false, shuttingDown()
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
	h.poke()
	return status, nil
}

// setStatus hands the status st to every stream, and to each that joins
// later first.
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
	delete(h.streams, st)
	h.m.eventStreams.Dec()
	if len(h.streams) == 0 {
		h.poke()
	}
}

// poke wakes the loop (h.mu held).
func (h *eventHub) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// close ends every stream and stops the loop for good: the handler's owner
// calls it as the server shuts down. Later streams are refused.
// A second call returns once the first has.
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
	delete(h.streams, st)
	h.m.eventStreams.Dec()
	close(st.out)
}

// hand gives st an item, dropping st when it is streamBuffer items behind
// (h.mu held).
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

func shuttingDown() *problem {
	return newProblem(http.StatusServiceUnavailable, wire.ProblemShuttingDown, "this limitd is shutting down; connect again")
}

// sampling is the state of one run of the loop.
type sampling struct {
	h       *eventHub
	sampler *core.Sampler // configs kept, live states read in pipelines
	round   uint64        // ticks so far
	all     []string      // every limiter, for the streams that watch them all; nil: not listed yet
	relist  bool          // a change came since all was listed
}

// loop is the hub's one sampling loop and subscription. It ends when no
// stream is left or the hub closes.
func (h *eventHub) loop() {
	defer h.wg.Done()
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	changes := h.svc.Changes(ctx) // subscribed before the first sample: no change falls between
	l := &sampling{h: h, sampler: h.svc.Sampler()}
	tick := h.newTicker(minEventInterval)
	defer tick.Stop()
	for {
		ok := true
		select {
		case <-ctx.Done():
		case ch, open := <-changes: // closed only as ctx ends
			if open {
				l.changed(ch)
			}
		case <-h.wake:
			ok = l.sample(ctx, false)
		case <-tick.C():
			l.round++
			ok = l.sample(ctx, true)
		}
		if !ok {
			return // no stream left: sample said so, running cleared
		}
		if ctx.Err() != nil {
			h.mu.Lock()
			h.running = false // closed: no loop starts again
			h.mu.Unlock()
			return
		}
	}
}

// changed tells a config change to every started stream that watches it.
func (l *sampling) changed(ch core.Change) {
	l.sampler.Changed(ch.Limiter)
	l.relist = true
	ev := encodeEvent("config", ch)
	h := l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range h.streams {
		if !st.started {
			continue // its first sample comes after the change
		}
		if _, watched := st.watch[ch.Limiter]; st.watch != nil && !ch.Templates && !watched {
			continue
		}
		h.hand(st, streamItem{change: ev})
	}
}

// sample runs one round for the streams due: on a tick those whose interval
// it completes, on a wake those that have had no sample yet. With no stream
// left it reports false, having cleared running in the same hold of the
// lock, so that a stream joining now starts a new loop rather than count on
// this one.
func (l *sampling) sample(ctx context.Context, tick bool) bool {
	h := l.h
	h.mu.Lock()
	if len(h.streams) == 0 {
		h.running = false
		h.mu.Unlock()
		return false
	}
	var due []*stream
	for st := range h.streams {
		if tick && st.started && l.round%st.every == 0 || !tick && !st.started {
			due = append(due, st)
		}
	}
	h.mu.Unlock()
	if len(due) == 0 {
		return true
	}
	// What they watch, each limiter once.
	var names []string
	seen := map[string]struct{}{}
	all := false
	for _, st := range due {
		if st.names == nil {
			all = true
		}
		for _, n := range st.names {
			if _, ok := seen[n]; !ok {
				seen[n] = struct{}{}
				names = append(names, n)
			}
		}
	}

	rctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	var listErr error
	if all && (l.all == nil || l.relist) {
		if list, err := l.list(rctx); err == nil {
			l.all, l.relist = list, false
		} else if l.all == nil {
			listErr = err
		} // else the list before the change serves until the next round
	}
	r := &eventRound{all: l.all, events: make(map[string]sampled, len(names)+len(l.all))}
	if all {
		for _, n := range l.all {
			if _, ok := seen[n]; !ok {
				seen[n] = struct{}{}
				names = append(names, n)
			}
		}
	}
	for batch := range slices.Chunk(names, sampleBatch) {
		ls, errs := l.sampler.GetAll(rctx, batch)
		for i, n := range batch {
			r.events[n] = l.encode(n, ls[i], errs[i])
		}
	}
	if ctx.Err() != nil {
		return true // closing: the loop sees it
	}
	if all && l.all != nil {
		// A limiter gone is told once to the streams that watch them all,
		// then no longer sampled for them.
		l.all = slices.DeleteFunc(slices.Clone(l.all), func(n string) bool { return r.events[n].kind == sampleGone })
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	for _, st := range due {
		if _, ok := h.streams[st]; !ok {
			continue // left meanwhile
		}
		if st.names == nil && listErr != nil {
			if !st.started {
				h.hand(st, streamItem{err: listErr}) // its answer is the error
				if _, ok := h.streams[st]; ok {
					h.end(st)
				}
			}
			continue
		}
		st.started = true
		h.hand(st, streamItem{round: r})
	}
	return true
}

// list is every limiter's name, the first maxEventLimiters in name order.
func (l *sampling) list(ctx context.Context) ([]string, error) {
	page, err := l.h.svc.List(ctx, "", maxEventLimiters)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(page.Limiters))
	for i, info := range page.Limiters {
		names[i] = info.Name
	}
	return names, nil
}

// encode is name's part of a round: the event its sample reads as.
func (l *sampling) encode(name string, lim core.Limiter, err error) sampled {
	switch {
	case errors.Is(err, core.ErrNotFound):
		return sampled{kind: sampleGone, ev: encodeEvent("config", core.Change{Limiter: name})}
	case unknownLayout(err):
		// Its state only a newer limitd reads (its own API calls answer 503
		// saying so): the others are still sampled.
		return sampled{kind: sampleSkip}
	case err != nil:
		return sampled{kind: sampleError, ev: encodeEvent("error", l.h.problem(err).Problem)}
	}
	return sampled{kind: sampleState, ev: encodeEvent("state", wire.LimiterEvent{Limiter: viewOf(lim), Signals: l.h.signals.of(name)})}
}

// encodeEvent is one Server-Sent Event: its name and v as JSON.
func encodeEvent(name string, v any) []byte {
	b, _ := json.Marshal(v) // wire bodies always encode
	out := make([]byte, 0, len(name)+len(b)+16)
	out = append(out, "event: "...)
	out = append(out, name...)
	out = append(out, "\ndata: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
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

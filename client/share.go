package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

// Share is one client's lease on a share limiter (a Doorman client): a part
// of a capacity that the limiter divides among the clients asking for it. It
// is safe for concurrent use.
//
// The share asks for capacity again every refresh interval the lease names,
// in a goroutine of its own that Close stops. What it wants is set with
// WithWants or SetWants, or else estimated from its own use over the last
// interval: the permits per second asked for through Allow (every call,
// allowed or not: call it once per operation) and Wait, or the most
// operations in flight and waiting through Acquire, with 10% headroom, and
// at least 1. Waiters that took all it got, mostly after waiting their turn,
// make it ask for twice what it gets.
//
// What it gets is used either as a rate, Wait and Allow (a local strict
// limiter at Gets permits per second), or as a gauge, Acquire (at most
// floor(Gets) operations in flight). Use one or the other.
//
// While Redis is unreachable, the share keeps using its lease until it
// expires (judged on the local clock), then follows its fallback mode (the
// client's WithFallback, or WithShareFallback): FallbackSafe uses the
// lease's safe capacity (before any lease: the client's WithSafeRate, and
// without one refuses), FallbackOptimistic is unlimited, FallbackPessimistic
// refuses: Allow is false, Wait and Acquire return limiter.ErrUnavailable.
// Once Redis answers it returns to leases by itself.
type Share struct {
	c    *Client
	name string
	id   string
	o    shareOptions

	ctx    context.Context // cancelled by Close: ends the refresher, waits and requests
	cancel context.CancelFunc
	kick   chan struct{} // SetWants asks the refresher for a request now
	done   chan struct{} // closed when the refresher has ended

	// reqMu serialises requests, so that leases apply in the order granted
	// and none is granted after Close returned the capacity.
	reqMu sync.Mutex

	mu       sync.Mutex
	lease    limitd.CapacityLease
	leased   bool  // lease is the last one granted (it may have expired)
	expires  int64 // local ns at which lease ends
	next     int64 // local ns of the next request
	err      error // the last request's error; nil after a grant
	wants    float64
	explicit bool    // wants was set, not estimated
	asked    float64 // the wants of the last request
	gets     float64 // in effect: the lease's, or the fallback's; +Inf: unlimited
	live     bool    // gets is the lease's, until it expires
	fallback bool    // gets is the fallback's
	refuse   error   // non-nil while nothing may pass and callers should not wait: why
	lim      *limiter.Limiter
	changed  chan struct{} // closed and replaced when gets changes, or a gauge slot frees for waiters
	inFlight int64         // gauge operations holding capacity
	waiting  int64         // gauge callers waiting for it
	closed   bool

	// use since the last request, for estimated wants
	calls    int64 // Allow calls (each an operation that wants to happen) and Wait grants
	granted  int64 // permits Allow and Wait took
	waits    int64 // Wait grants
	waited   int64 // of which had to wait for their turn
	usedFrom int64 // local ns
	peak     int64 // most gauge operations holding or waiting at once
}

const (
	shareHeadroom = 1.1  // estimated wants: recent use × this
	shareBusy     = 0.97 // a share that used this much of what it got was held back by it
	shareMinWants = 1    // the least estimated wants: an idle share can start at once
	// shareTimeout bounds one request, and Close's return of the capacity.
	shareTimeout = 5 * time.Second
)

// ShareOption configures a Share.
type ShareOption func(*shareOptions)

type shareOptions struct {
	clientID    string
	wants       float64 // < 0: estimated
	priority    float64
	fallback    Fallback
	hasFallback bool
}

// WithClientID sets the id the share asks under (default
// hostname-pid-random). Two shares with the same id on the same limiter are
// one client to it: give each process, and each share in it, its own id.
func WithClientID(id string) ShareOption { return func(o *shareOptions) { o.clientID = id } }

// WithWants sets what the share asks for instead of estimating it.
func WithWants(w float64) ShareOption { return func(o *shareOptions) { o.wants = w } }

// WithPriority sets the weight of the share's claim (default 1): it counts
// as that many clients in the algorithm's equal shares, so that of two
// clients wanting all of the capacity, one with priority 2 gets two thirds.
func WithPriority(p float64) ShareOption { return func(o *shareOptions) { o.priority = p } }

// WithShareFallback sets the share's fallback mode, overriding the client's.
func WithShareFallback(f Fallback) ShareOption {
	return func(o *shareOptions) { o.fallback, o.hasFallback = f, true }
}

// Share asks the named share limiter for capacity and returns the share,
// which keeps asking until Close. An unknown limiter is limiter.ErrNotFound,
// one of another kind limiter.ErrConflict, a bad name, client id or wants
// limiter.ErrInvalid. An unreachable Redis is not an error: the share starts
// in its fallback mode.
func (c *Client) Share(name string, opts ...ShareOption) (*Share, error) {
	if err := limitd.CheckName(name); err != nil {
		return nil, err
	}
	o := shareOptions{wants: -1}
	for _, f := range opts {
		f(&o)
	}
	if !o.hasFallback {
		o.fallback = c.o.fallback
	}
	if o.clientID == "" {
		o.clientID = defaultClientID()
	}
	if err := checkWants(o.wants); err != nil {
		return nil, err
	}
	s := &Share{c: c, name: name, id: o.clientID, o: o, kick: make(chan struct{}, 1),
		done: make(chan struct{}), changed: make(chan struct{}), wants: o.wants, explicit: o.wants >= 0}
	s.ctx, s.cancel = context.WithCancel(c.ctx)
	s.usedFrom = c.mono()
	if err := c.track(s); err != nil {
		s.cancel()
		return nil, err
	}
	if err := s.request(); err != nil && !unreachable(err) {
		s.cancel()
		close(s.done) // for a Close by the client's meanwhile
		c.untrack(s)
		return nil, err
	}
	go s.run()
	return s, nil
}

// checkWants accepts a finite wants; a negative one means "estimate it".
func checkWants(w float64) error {
	if math.IsNaN(w) || math.IsInf(w, 0) {
		return &limiter.FieldError{Field: "wants", Rule: "must be ≥ 0 and finite (< 0: estimated from use)", Value: w}
	}
	return nil
}

// defaultClientID is hostname-pid-random, made a valid client id.
func defaultClientID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r < 128 && (isAlnum(byte(r)) || r == '.' || r == '_' || r == '-') {
			return r
		}
		return '-'
	}, host)
	host = host[:min(len(host), 64)]
	if host == "" || !isAlnum(host[0]) {
		host = "h" + host
	}
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// ClientID is the id the share asks under.
func (s *Share) ClientID() string { return s.id }

// Gets is the capacity in effect: the lease's while it is valid, else the
// fallback's (+Inf: unlimited).
func (s *Share) Gets() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

// ShareLease describes a share's lease and what is in effect.
type ShareLease struct {
	Gets         float64       // what the last lease granted
	Expires      time.Time     // when it ends (Redis clock); zero before any lease
	Refresh      time.Duration // how often the share asks again
	SafeCapacity float64       // what FallbackSafe uses
	Learning     bool          // granted in learning mode (the limiter's state was lost)
	Version      int64         // the limiter's config version
	Valid        bool          // the lease has not expired
	Wants        float64       // what the last request asked for
	InEffect     float64       // Gets(): the lease's, or the fallback's
	Fallback     bool          // the fallback mode is in effect
	Err          error         // the last request's error (nil after a grant)
}

// Lease returns the share's last lease and its state.
func (s *Share) Lease() ShareLease {
	now := s.c.mono()
	s.mu.Lock()
	defer s.mu.Unlock()
	l := ShareLease{Wants: s.asked, InEffect: s.gets, Fallback: s.fallback, Err: s.err}
	if s.leased {
		l.Gets, l.Refresh, l.SafeCapacity = s.lease.Gets, time.Duration(s.lease.Refresh), s.lease.SafeCapacity
		l.Expires, l.Learning, l.Version = time.Unix(0, s.lease.Expires), s.lease.Learning, s.lease.Version
		l.Valid = now < s.expires
	}
	return l
}

// SetWants sets what the share asks for (w < 0: estimate it again from use)
// and asks at once, without waiting for the next refresh.
func (s *Share) SetWants(w float64) error {
	if err := checkWants(w); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.wants, s.explicit = w, w >= 0
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// Refresh asks for capacity now, as the refresher does, and returns its error.
func (s *Share) Refresh(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	ctx, stop := mergeDone(ctx, s.ctx)
	defer stop()
	return s.requestCtx(ctx)
}

// Close stops the refresher, ends every wait with ErrClosed and returns the capacity.
func (s *Share) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.notifyLocked()
	s.mu.Unlock()
	s.cancel()
	<-s.done
	s.c.untrack(s)
	return s.giveBack()
}

// giveBack returns the capacity the share holds, if any.
func (s *Share) giveBack() error {
	s.reqMu.Lock() // after the request in flight, if any; none follows
	defer s.reqMu.Unlock()
	s.mu.Lock()
	leased := s.leased
	s.mu.Unlock()
	if !leased {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), shareTimeout)
	defer cancel()
	if err := s.c.t.ReturnCapacity(ctx, s.name, s.id); err != nil && !errors.Is(err, limiter.ErrNotFound) {
		return fmt.Errorf("client: share %q: returning capacity: %w", s.name, err)
	}
	return nil
}

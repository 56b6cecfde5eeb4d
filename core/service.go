package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// MaxListLimit is the largest page List answers; DefaultListLimit the page
// without a limit.
const (
	MaxListLimit     = store.MaxListLimit
	DefaultListLimit = 100
)

// Options configure a Service.
type Options struct {
	Observer Observer // sees every decision and store call (nil: none)
	// DecideTimeout bounds the Redis part of one acquire (not the wait of a
	// blocking one); 0: 1.5 s, so that a hung Redis holds callers no longer
	// than any other call (store.NewClient's timeouts, one retry).
	DecideTimeout time.Duration
	Clock         limiter.Clock // a blocking acquire's (nil: limiter.SystemClock())
	Shadow        bool          // every limiter in shadow mode (shadow.go): LIMITD_SHADOW_MODE
	QuotaMode     bool          // every counter of a metered call a quota counter (Count)
	// Ledger counts decisions into Redis totals beside Observer (nil:
	// none); the caller runs its Run.
	Ledger *Ledger
	// OverLimitCache is how many window counters Count may remember as over
	// their limit (overlimit.go); 0: none.
	OverLimitCache int
	Redis          RedisSettings // named by Unavailability's fixes
	// Counting is how the Envoy rules count (LIMITD_GRPC_COUNTING): under
	// CountStrict a template is put without FixedWindows (its instances
	// count in their state, as a strict call counts them).
	Counting Counting
}

const defaultDecideTimeout = 1500 * time.Millisecond

// Service is limitd's operations over one store. It is safe for concurrent
// use; it keeps no state a replica would need from another (grants travel
// with their token), only hints that save round trips.
type Service struct {
	store     timed // the store, each call reported to obs
	obs       Observer
	decide    time.Duration
	clock     limiter.Clock
	slots     hints[struct{}]      // names seen to be concurrency limiters
	shadows   hints[shadowHint]    // named limiters' shadow mode by version
	shadow    bool                 // Options.Shadow
	quota     bool                 // Options.QuotaMode
	over      *overLimit           // nil: none
	instances hints[instanceCount] // template id → its last instance count
	ledger    *Ledger
	redis     RedisSettings
	loss      dataLoss
	counting  Counting
}

// LedgerOverflow is the Ledger's Overflow (0 without a ledger).
func (s *Service) LedgerOverflow() int64 {
	if s.ledger == nil {
		return 0
	}
	return s.ledger.Overflow()
}

// Counting is Options.Counting.
func (s *Service) Counting() Counting { return s.counting }

// observers hands each event to every one of them.
type observers []Observer

func (os observers) StoreCall(op Op, took time.Duration) {
	for _, o := range os {
		o.StoreCall(op, took)
	}
}

func (os observers) Decided(e Event) {
	for _, o := range os {
		o.Decided(e)
	}
}

// positiveOr is v, or def when v is not positive (an option left unset).
func positiveOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// New returns the service over st. It panics if st is nil.
func New(st *store.Store, o Options) *Service {
	if st == nil {
		panic("core: store is nil")
	}
	return over(st, o)
}

func over(st backend, o Options) *Service {
	s := &Service{obs: o.Observer, decide: positiveOr(o.DecideTimeout, defaultDecideTimeout), clock: o.Clock,
		shadow: o.Shadow, quota: o.QuotaMode, counting: o.Counting, over: newOverLimit(o.OverLimitCache), redis: o.Redis}
	s.loss.found = make(chan struct{}, 1)
	s.redis.Address = cmp.Or(s.redis.Address, "LIMITD_REDIS_URL")
	s.redis.Credentials = cmp.Or(s.redis.Credentials, s.redis.Address)
	s.clock = cmp.Or(s.clock, limiter.SystemClock())
	s.obs = cmp.Or[Observer](s.obs, observers{}) // none
	if o.Ledger != nil {
		s.obs = observers{s.obs, o.Ledger}
		s.ledger = o.Ledger
	}
	s.store = timed{backend: st, obs: s.obs}
	return s
}

// Ready reports whether limitd can decide: every Redis master it needs
// accepts a write (store.Ready), and no data loss is pending (ErrDataLost).
func (s *Service) Ready(ctx context.Context) error {
	if err := s.store.Ready(ctx); err != nil {
		return err
	}
	if _, err := s.CheckMarker(ctx); err != nil {
		return err
	}
	if at, pending, _ := s.DataLoss(); pending {
		return fmt.Errorf("%w: %w (found at %s)", ErrUnavailable, ErrDataLost, time.Unix(0, at).UTC().Format(time.RFC3339))
	}
	return nil
}

// Lost reports which of the named limiters and templates Redis lost (see
// store.Lost); when some checks fail, the names found lost are returned
// with an error matching ErrUnavailable.
func (s *Service) Lost(ctx context.Context, limiters, templates []string) (lostLimiters, lostTemplates []string, err error) {
	return s.store.Lost(ctx, limiters, templates)
}

// Mark records which configuration was last applied to this Redis: sum (a
// file's hash; empty without one) under the key <prefix>:boot, the marker
// whose loss tells that Redis lost limitd's data (docs/reliability.md); on
// a Redis Cluster it is one shard's, and Lost tells what each shard lost. A
// Mark that succeeds ends a pending loss.
func (s *Service) Mark(ctx context.Context, sum string) error {
	if err := s.store.Mark(ctx, sum); err != nil {
		return err
	}
	s.loss.mu.Lock()
	s.loss.marked, s.loss.pending = true, false
	s.loss.marks++
	s.loss.mu.Unlock()
	return nil
}

// CheckMarker looks for limitd's marker once it was written (Mark): when it
// is gone, Redis lost limitd's data (DataLost). It reports whether a loss
// is pending: found now or before, and not marked again since.
func (s *Service) CheckMarker(ctx context.Context) (pending bool, err error) {
	s.loss.mu.Lock()
	marking, marks := s.loss.marked, s.loss.marks
	s.loss.mu.Unlock()
	if !marking {
		return false, nil
	}
	marked, now, err := s.store.Marked(ctx) // and Redis' time, in one round trip
	if err != nil {
		return false, err
	}
	s.loss.mu.Lock()
	defer s.loss.mu.Unlock()
	// A Mark that succeeded while the answer was on its way wrote the
	// marker again: the answer tells of the loss that Mark ended.
	if !marked && s.loss.marks == marks {
		s.loss.lost(now)
	}
	return s.loss.pending, nil
}

// dataLoss is what the service knows of Redis losing its data.
type dataLoss struct {
	mu      sync.Mutex
	marked  bool  // Mark succeeded once: a missing marker now means a loss
	marks   int64 // Marks that succeeded
	at      int64 // when the last loss was found, Redis time; 0: never
	pending bool  // found lost, not marked again yet
	count   int64
	found   chan struct{} // told each new loss (capacity 1)
}

// DataLost records that Redis was found to have lost limitd's data at at
// (Redis time, Unix ns): Ready fails until Mark succeeds again. It reports
// whether this is a new loss (false while one is pending).
func (s *Service) DataLost(at int64) bool {
	s.loss.mu.Lock()
	defer s.loss.mu.Unlock()
	return s.loss.lost(at)
}

// lost is DataLost, called with l.mu.
func (l *dataLoss) lost(at int64) bool {
	if l.pending {
		return false
	}
	l.at, l.pending = at, true
	l.count++
	select {
	case l.found <- struct{}{}:
	default: // told already, not taken yet
	}
	return true
}

// DataLosses is told each new data loss, so that a keeper applies the
// configuration again at once. One keeper reads it.
func (s *Service) DataLosses() <-chan struct{} { return s.loss.found }

// DataLoss reports when Redis was last found to have lost limitd's data
// (Redis time, Unix ns; 0: never), whether that loss is pending, and how
// many losses this process found.
func (s *Service) DataLoss() (at int64, pending bool, count int64) {
	s.loss.mu.Lock()
	defer s.loss.mu.Unlock()
	return s.loss.at, s.loss.pending, s.loss.count
}

// ErrDataLost is what Ready answers (wrapped, matching ErrUnavailable too)
// while a data loss is pending.
var ErrDataLost = errors.New("redis lost limitd's data; the configuration is being applied again")

// subjectOf names the subject of a rate decision: the limiter's name, or an
// instance's template id (a round trip, only for an instance).
func (s *Service) subjectOf(ctx context.Context, name string, instance bool) (lim, tpl string) {
	if !instance {
		return name, ""
	}
	if t, err := s.store.Resolve(ctx, name); err == nil {
		return "", t.ID
	}
	return "", ""
}

// subject is subjectOf for kinds whose replies do not say whether a template
// instance answered: it asks Redis when a template matches the name.
func (s *Service) subject(ctx context.Context, name string) (lim, tpl string) {
	t, err := s.store.Resolve(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return name, "" // no template matches: only a limiter could have answered
	}
	if err != nil {
		return "", "" // unknown; never the name, which may be an instance's
	}
	_, err = s.store.Get(ctx, name) // a limiter of that name comes before templates
	if err == nil {
		return name, ""
	}
	return "", t.ID
}

// instanceOf is an event's Instance: name when its subject is a template.
func instanceOf(name, tpl string) string {
	if tpl == "" {
		return ""
	}
	return name
}

func (s *Service) event(ctx context.Context, kind EventKind, name, outcome string) {
	lim, tpl := s.subject(ctx, name)
	s.obs.Decided(Event{Kind: kind, Limiter: lim, Template: tpl, Instance: instanceOf(name, tpl), Outcome: outcome})
}

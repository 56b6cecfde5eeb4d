package core

import (
	"context"
	"errors"
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
	// Observer sees every decision and store call (nil: none). It is the
	// service's one observer, whatever front end calls it: limitd serve
	// hands it internal/coremetrics' (the Prometheus series of /metrics).
	Observer Observer
	// DecideTimeout bounds the Redis part of one acquire (not the wait of a
	// blocking one); 0: 1.5 s. A healthy Redis answers in a millisecond, and
	// a hung one must not hold callers longer than any other call (about
	// 1 s: store.NewClient's timeouts, one retry).
	DecideTimeout time.Duration
	// Clock is what a blocking acquire reads and sleeps on (nil:
	// limiter.SystemClock()).
	Clock limiter.Clock
	// Shadow puts every limiter in shadow mode (see shadow.go), whatever
	// its config says: LIMITD_SHADOW_MODE.
	Shadow bool
	// QuotaMode makes every counter of a metered call a quota counter
	// (Count): the call is refused only when all of them are over.
	QuotaMode bool
	// Ledger counts decisions into Redis totals (nil: none, totals stay
	// as other processes count them); it observes beside Observer. The
	// caller runs its Run.
	Ledger *Ledger
	// OverLimitCache is how many window counters Count may remember as
	// over their limit, to answer them without Redis until they could
	// grant again (see overlimit.go); 0: none, every call asks Redis.
	OverLimitCache int
	// Redis names the settings that give limitd its Redis, for the fixes
	// Unavailability names (zero: LIMITD_REDIS_URL).
	Redis RedisSettings
	// Counting is how the Envoy rules count (LIMITD_GRPC_COUNTING): under
	// CountEvery, the default, a template with FixedWindows is put as it
	// is; under CountStrict it is put without (its instances count in
	// their state, as a strict call counts them).
	Counting Counting
}

const defaultDecideTimeout = 1500 * time.Millisecond

// Service is limitd's operations over one store. It is safe for concurrent
// use; it keeps no state a replica would need from another (grants travel
// with their token), only hints that save round trips.
type Service struct {
	store  timed // the store, each call reported to obs
	obs    Observer
	decide time.Duration
	clock  limiter.Clock
	slots  hints[struct{}] // names seen to be concurrency limiters
	shadow bool            // every limiter in shadow mode (Options.Shadow)
	quota  bool            // every counter of a metered call a quota counter (Options.QuotaMode)
	// shadows remembers named limiters' shadow mode by version (shadow.go).
	shadows hints[shadowHint]
	// over is the over-limit cache (overlimit.go; nil: none).
	over *overLimit
	// instances caches counts of templates' instances (CachedInstances).
	instances instanceCache
	ledger    *Ledger // Options.Ledger
	redis     RedisSettings
	// loss is what is known of Redis losing limitd's data (kept.go).
	loss     dataLoss
	counting Counting // Options.Counting
}

// LedgerOverflow is the Ledger's Overflow: decisions counted only under
// their template, the interval having its most names (0 without a ledger).
func (s *Service) LedgerOverflow() int64 {
	if s.ledger == nil {
		return 0
	}
	return s.ledger.Overflow()
}

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

// New returns the service over st. It panics if st is nil.
func New(st *store.Store, o Options) *Service {
	if st == nil {
		panic("core: store is nil")
	}
	return over(st, o)
}

// over is New over any backend.
func over(st backend, o Options) *Service {
	s := &Service{obs: o.Observer, decide: o.DecideTimeout, clock: o.Clock, shadow: o.Shadow, quota: o.QuotaMode,
		counting: o.Counting, over: newOverLimit(o.OverLimitCache), redis: o.Redis.orDefault()}
	s.loss.found = make(chan struct{}, 1)
	if s.clock == nil {
		s.clock = limiter.SystemClock()
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	if o.Ledger != nil {
		s.obs = observers{s.obs, o.Ledger}
		s.ledger = o.Ledger
	}
	if s.decide <= 0 {
		s.decide = defaultDecideTimeout
	}
	s.store = timed{backend: st, obs: s.obs}
	return s
}

// Ready reports whether limitd can decide: every Redis master it needs
// accepts a write (store.Ready).
//
// Once limitd's marker was written (Mark), Ready also fails while Redis
// has lost limitd's data and the configuration is not applied again
// (ErrDataLost): its marker found gone, here or by a keeper (CheckMarker).
func (s *Service) Ready(ctx context.Context) error {
	if err := s.store.Ready(ctx); err != nil {
		return err
	}
	if s.marking() {
		if _, err := s.CheckMarker(ctx); err != nil {
			return err
		}
	}
	return s.lostErr()
}

// subjectOf names the subject of a rate decision whose reply said whether a
// template instance answered: the limiter's name, or the template's id
// (never an instance's name). It costs a round trip only for an instance.
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
// instance answered (share, concurrency): it asks Redis when a template
// matches the name.
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

// instanceOf is the instance name of an event on name whose subject is the
// template tpl: name, or "" when tpl is.
func instanceOf(name, tpl string) string {
	if tpl == "" {
		return ""
	}
	return name
}

// event reports a decision on name of a kind whose reply does not say
// whether an instance answered.
func (s *Service) event(ctx context.Context, kind EventKind, name, outcome string) {
	lim, tpl := s.subject(ctx, name)
	s.obs.Decided(Event{Kind: kind, Limiter: lim, Template: tpl, Instance: instanceOf(name, tpl), Outcome: outcome})
}

package core

import (
	"context"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/store"
)

// Ledger counts decisions in memory (store.Tally: no Redis command on the
// decision's path) and adds them to Redis once a second, so that a
// limiter's totals and a template's busiest instances (Service.Top) are
// those of every limitd sharing the Redis. Hand it to core.New as
// Options.Ledger and run Run on a goroutine the caller owns.
//
// A rate decision granted or charged counts as granted; denied or shadow
// as refused; voided not at all. A concurrency slot counts as one permit
// the same way. Share capacity and leases do not count.
type Ledger struct {
	every time.Duration
	tally *store.Tally
}

// LedgerOptions configure a Ledger; zero values take the defaults.
type LedgerOptions struct {
	Every    time.Duration    // between flushes; default 1 s
	MaxNames int              // distinct limiters and instances per interval; default 10,000
	TopK     int              // top entries per template, by refused and by granted, per flush; default 100
	Clock    func() time.Time // picks a flush's minute bucket; default time.Now
}

// NewLedger returns a ledger that adds to st's Redis.
func NewLedger(st *store.Store, o LedgerOptions) *Ledger {
	return &Ledger{every: positiveOr(o.Every, time.Second),
		tally: st.NewTally(store.TallyOptions{MaxNames: o.MaxNames, TopK: o.TopK, Clock: o.Clock})}
}

// StoreCall is not counted.
func (l *Ledger) StoreCall(Op, time.Duration) {}

// Decided counts e (see Ledger for what counts how).
func (l *Ledger) Decided(e Event) {
	permits := e.Permits
	if e.Kind == EventSlot {
		permits = 1
	}
	var c limitd.Counts
	switch {
	case e.Kind != EventRate && e.Kind != EventSlot:
		return
	case e.Outcome == "granted", e.Kind == EventRate && e.Outcome == "charged":
		c = limitd.Counts{GrantedCalls: 1, GrantedPermits: permits}
	case e.Outcome == "denied", e.Outcome == "shadow":
		c = limitd.Counts{RefusedCalls: 1, RefusedPermits: permits}
	default:
		return
	}
	l.tally.Add(limitd.Subject{Limiter: e.Limiter, Template: e.Template, Instance: e.Instance}, c)
}

// Overflow is store.Tally.Overflow.
func (l *Ledger) Overflow() int64 { return l.tally.Overflow() }

// Run flushes every interval until ctx is done, then once more (within 2 s).
func (l *Ledger) Run(ctx context.Context) {
	tick := time.NewTicker(l.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = l.Flush(fctx)
			cancel()
			return
		case <-tick.C:
			_ = l.Flush(ctx)
		}
	}
}

// Flush adds what was counted since the last flush to Redis.
func (l *Ledger) Flush(ctx context.Context) error { return l.tally.Flush(ctx) }

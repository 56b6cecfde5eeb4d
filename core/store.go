package core

import (
	"context"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// backend is what the service asks of its store: a *store.Store in
// production, a fake in the tests of the service's own rules.
type backend interface {
	Ready(ctx context.Context) error
	Get(ctx context.Context, name string) (limitd.Info, error)
	Resolve(ctx context.Context, name string) (limitd.Template, error)
	Put(ctx context.Context, name string, c limiter.Config) (info limitd.Info, created bool, err error)
	Patch(ctx context.Context, name string, apply func(limiter.Config) (limiter.Config, error)) (limitd.Info, error)
	Delete(ctx context.Context, name string) error
	List(ctx context.Context, cursor string, limit int) ([]limitd.Info, string, error)
	AcquireWithin(ctx context.Context, name string, n int64, maxWait, within time.Duration) (limitd.Decision, error)
	AcquireAll(ctx context.Context, reqs []limitd.MultiRequest, maxWait time.Duration) (limitd.MultiDecision, error)
	AcquireManyWithin(ctx context.Context, reqs []store.Request, within time.Duration) []store.Outcome
	ChargeWithin(ctx context.Context, name string, n int64, within time.Duration) (limitd.Decision, error)
	Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error)
	Release(ctx context.Context, g limitd.Grant, m int64) (bool, error)
	Wait(ctx context.Context, name string) (limitd.WaitInfo, error)
	WaitMany(ctx context.Context, names []string) ([]limitd.WaitInfo, []error)
	FixedWait(ctx context.Context, name string, f store.Fixed) (limitd.WaitInfo, error)
	FixedReset(ctx context.Context, name string, f store.Fixed) error
	Reset(ctx context.Context, name string) (version int64, err error)
	Holders(ctx context.Context, name string) (limitd.Holders, error)
	InstanceTTL(ctx context.Context, name string) (int64, error)
	Capacity(ctx context.Context, name string, r limitd.CapacityRequest) (limitd.CapacityLease, error)
	ReturnCapacity(ctx context.Context, name, clientID string) error
	AcquireSlot(ctx context.Context, name string) (limitd.SlotLease, error)
	RenewSlot(ctx context.Context, name, id string) (limitd.SlotLease, error)
	ReleaseSlot(ctx context.Context, name, id string) error
	GetTemplate(ctx context.Context, id string) (limitd.Template, error)
	PutTemplate(ctx context.Context, t limitd.Template) (limitd.Template, error)
	DeleteTemplate(ctx context.Context, id string) error
	Templates(ctx context.Context) ([]limitd.Template, error)
	InstanceCount(ctx context.Context, pattern string) (n int64, exact bool, err error)
	Totals(ctx context.Context, names []string) ([]limitd.Counts, error)
	Top(ctx context.Context, id string, refused bool, limit, minutes int) (since int64, out []limitd.TopInstance, err error)
	Lost(ctx context.Context, limiters, templates []string) (lostLimiters, lostTemplates []string, err error)
	Mark(ctx context.Context, sum string) error
	Marked(ctx context.Context) (marked bool, now int64, err error)
	Changes(ctx context.Context) <-chan string
}

var _ backend = (*store.Store)(nil)

// timed reports each store call that goes to Redis to the observer as its
// Op; Resolve (cached) and Changes pass through untimed.
type timed struct {
	backend
	obs Observer
}

func (t timed) since(op Op, start time.Time) { t.obs.StoreCall(op, time.Since(start)) }

func (t timed) Ready(ctx context.Context) error {
	defer t.since(OpPing, time.Now())
	return t.backend.Ready(ctx)
}

func (t timed) Get(ctx context.Context, name string) (limitd.Info, error) {
	defer t.since(OpGet, time.Now())
	return t.backend.Get(ctx, name)
}

func (t timed) Put(ctx context.Context, name string, c limiter.Config) (limitd.Info, bool, error) {
	defer t.since(OpPut, time.Now())
	return t.backend.Put(ctx, name, c)
}

func (t timed) Patch(ctx context.Context, name string, apply func(limiter.Config) (limiter.Config, error)) (limitd.Info, error) {
	defer t.since(OpPatch, time.Now())
	return t.backend.Patch(ctx, name, apply)
}

func (t timed) Delete(ctx context.Context, name string) error {
	defer t.since(OpDelete, time.Now())
	return t.backend.Delete(ctx, name)
}

func (t timed) List(ctx context.Context, cursor string, limit int) ([]limitd.Info, string, error) {
	defer t.since(OpList, time.Now())
	return t.backend.List(ctx, cursor, limit)
}

func (t timed) AcquireWithin(ctx context.Context, name string, n int64, maxWait, within time.Duration) (limitd.Decision, error) {
	defer t.since(OpAcquire, time.Now())
	return t.backend.AcquireWithin(ctx, name, n, maxWait, within)
}

func (t timed) AcquireAll(ctx context.Context, reqs []limitd.MultiRequest, maxWait time.Duration) (limitd.MultiDecision, error) {
	defer t.since(OpAcquireAll, time.Now())
	return t.backend.AcquireAll(ctx, reqs, maxWait)
}

func (t timed) AcquireManyWithin(ctx context.Context, reqs []store.Request, within time.Duration) []store.Outcome {
	defer t.since(OpCount, time.Now())
	return t.backend.AcquireManyWithin(ctx, reqs, within)
}

func (t timed) ChargeWithin(ctx context.Context, name string, n int64, within time.Duration) (limitd.Decision, error) {
	defer t.since(OpCharge, time.Now())
	return t.backend.ChargeWithin(ctx, name, n, within)
}

func (t timed) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	defer t.since(OpGrant, time.Now())
	return t.backend.Grant(ctx, name, k, maxWait)
}

func (t timed) Release(ctx context.Context, g limitd.Grant, m int64) (bool, error) {
	defer t.since(OpHandback, time.Now())
	return t.backend.Release(ctx, g, m)
}

func (t timed) Wait(ctx context.Context, name string) (limitd.WaitInfo, error) {
	defer t.since(OpWait, time.Now())
	return t.backend.Wait(ctx, name)
}

func (t timed) WaitMany(ctx context.Context, names []string) ([]limitd.WaitInfo, []error) {
	defer t.since(OpWaitMany, time.Now())
	return t.backend.WaitMany(ctx, names)
}

func (t timed) FixedWait(ctx context.Context, name string, f store.Fixed) (limitd.WaitInfo, error) {
	defer t.since(OpWait, time.Now())
	return t.backend.FixedWait(ctx, name, f)
}

func (t timed) FixedReset(ctx context.Context, name string, f store.Fixed) error {
	defer t.since(OpReset, time.Now())
	return t.backend.FixedReset(ctx, name, f)
}

func (t timed) Reset(ctx context.Context, name string) (int64, error) {
	defer t.since(OpReset, time.Now())
	return t.backend.Reset(ctx, name)
}

func (t timed) Holders(ctx context.Context, name string) (limitd.Holders, error) {
	defer t.since(OpHolders, time.Now())
	return t.backend.Holders(ctx, name)
}

func (t timed) InstanceTTL(ctx context.Context, name string) (int64, error) {
	defer t.since(OpInstanceTTL, time.Now())
	return t.backend.InstanceTTL(ctx, name)
}

func (t timed) Capacity(ctx context.Context, name string, r limitd.CapacityRequest) (limitd.CapacityLease, error) {
	defer t.since(OpCapacity, time.Now())
	return t.backend.Capacity(ctx, name, r)
}

func (t timed) ReturnCapacity(ctx context.Context, name, clientID string) error {
	defer t.since(OpReturnCapacity, time.Now())
	return t.backend.ReturnCapacity(ctx, name, clientID)
}

func (t timed) AcquireSlot(ctx context.Context, name string) (limitd.SlotLease, error) {
	defer t.since(OpAcquireSlot, time.Now())
	return t.backend.AcquireSlot(ctx, name)
}

func (t timed) RenewSlot(ctx context.Context, name, id string) (limitd.SlotLease, error) {
	defer t.since(OpRenewSlot, time.Now())
	return t.backend.RenewSlot(ctx, name, id)
}

func (t timed) ReleaseSlot(ctx context.Context, name, id string) error {
	defer t.since(OpReleaseSlot, time.Now())
	return t.backend.ReleaseSlot(ctx, name, id)
}

func (t timed) GetTemplate(ctx context.Context, id string) (limitd.Template, error) {
	defer t.since(OpGetTemplate, time.Now())
	return t.backend.GetTemplate(ctx, id)
}

func (t timed) PutTemplate(ctx context.Context, tpl limitd.Template) (limitd.Template, error) {
	defer t.since(OpPutTemplate, time.Now())
	return t.backend.PutTemplate(ctx, tpl)
}

func (t timed) DeleteTemplate(ctx context.Context, id string) error {
	defer t.since(OpDeleteTemplate, time.Now())
	return t.backend.DeleteTemplate(ctx, id)
}

func (t timed) Templates(ctx context.Context) ([]limitd.Template, error) {
	defer t.since(OpTemplates, time.Now())
	return t.backend.Templates(ctx)
}

func (t timed) InstanceCount(ctx context.Context, pattern string) (int64, bool, error) {
	defer t.since(OpInstances, time.Now())
	return t.backend.InstanceCount(ctx, pattern)
}

func (t timed) Totals(ctx context.Context, names []string) ([]limitd.Counts, error) {
	defer t.since(OpTotals, time.Now())
	return t.backend.Totals(ctx, names)
}

func (t timed) Top(ctx context.Context, id string, refused bool, limit, minutes int) (int64, []limitd.TopInstance, error) {
	defer t.since(OpTop, time.Now())
	return t.backend.Top(ctx, id, refused, limit, minutes)
}

func (t timed) Lost(ctx context.Context, limiters, templates []string) ([]string, []string, error) {
	defer t.since(OpLost, time.Now())
	return t.backend.Lost(ctx, limiters, templates)
}

func (t timed) Mark(ctx context.Context, sum string) error {
	defer t.since(OpMark, time.Now())
	return t.backend.Mark(ctx, sum)
}

func (t timed) Marked(ctx context.Context) (bool, int64, error) {
	defer t.since(OpMark, time.Now())
	return t.backend.Marked(ctx)
}

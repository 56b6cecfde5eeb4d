package store

import (
	"context"
	"errors"
	"time"
)

// AcquireMany decides many acquires, on any limiters, in one round trip per
// Redis node. The requests of one limiter are decided by one call, in order,
// at one Redis time; on a single Redis server one call decides up to
// batchCallSize requests of any limiters. Outcomes are in request order.
func (s *Store) AcquireMany(ctx context.Context, reqs []Request) []Outcome {
	out := s.acquireManyDirectUntil(ctx, reqs, time.Time{})
	s.askWithBounds(ctx, reqs, out, time.Time{})
	return out
}

// AcquireManyWithin is AcquireMany whose caller waits at most within (> 0;
// 0: as long as ctx allows) for Redis to answer, as AcquireWithin: with
// batching on, the requests go out in one batch with those of concurrent
// callers. A request that could not be decided has its Err.
func (s *Store) AcquireManyWithin(ctx context.Context, reqs []Request, within time.Duration) []Outcome {
	if len(reqs) == 0 {
		return nil
	}
	until := untilOf(within)
	var out []Outcome
	if s.batcher != nil {
		out = s.batcher.acquireMany(ctx, reqs, until)
	} else {
		out = s.acquireManyDirectUntil(ctx, reqs, until)
	}
	s.askWithBounds(ctx, reqs, out, until)
	return out
}

// askWithBounds asks again, by until, the requests of out that a calendar
// window could not decide without its bounds, once they are sent.
func (s *Store) askWithBounds(ctx context.Context, reqs []Request, out []Outcome, until time.Time) {
	var again []int
	sent := map[string]bool{} // name → bounds sent
	for i := range out {
		if _, ok := errors.AsType[*needBounds](out[i].Err); !ok {
			continue
		}
		name := reqs[i].Name
		ok, seen := sent[name]
		if !seen {
			ok = s.boundsSentUntil(ctx, name, until, &out[i].Err)
			sent[name] = ok
		}
		if ok {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return
	}
	sub := make([]Request, len(again))
	for j, i := range again {
		sub[j] = reqs[i]
	}
	subOut := s.acquireManyDirectUntil(ctx, sub, until)
	for j, i := range again {
		out[i] = subOut[j]
	}
}

// acquireManyDirectUntil is AcquireMany ending by until, without asking
// again for calendar bounds.
func (s *Store) acquireManyDirectUntil(ctx context.Context, reqs []Request, until time.Time) []Outcome {
	ctx, cancel := withUntil(ctx, until)
	defer cancel()
	out := make([]Outcome, len(reqs))
	s.acquireMany(ctx, reqs, out, new(batchScratch))
	return out
}

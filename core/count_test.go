package core

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/limitd/limitd/limiter"
)

// countRig is a service over miniredis with window limiters w1 and w2 (a
// limit of 2 a minute; w2 in shadow mode), deny (a window of 0) and sched
// (a strict schedule of 1/s).
func countRig(t *testing.T, o Options) *Service {
	t.Helper()
	s, _, _ := newService(t)
	s = over(s.store.backend, o)
	two, zero := int64(2), int64(0)
	ctx := context.Background()
	for name, c := range map[string]limiter.Config{
		"w1":    {Kind: limiter.KindWindow, Limit: &two, Period: "1m"},
		"w2":    {Kind: limiter.KindWindow, Limit: &two, Period: "1m", Shadow: true},
		"deny":  {Kind: limiter.KindWindow, Limit: &zero, Period: "1m"},
		"sched": {Rate: 1, Burst: limiter.B(1)},
	} {
		if _, _, err := s.Put(ctx, name, c); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// over lists which counters of a result are over, shadow ones marked.
func overs(r CountResult) string {
	out := ""
	for _, c := range r.Counts {
		switch {
		case c.Over && c.Shadow:
			out += "s"
		case c.Over:
			out += "o"
		default:
			out += "."
		}
	}
	return out
}

func TestCount(t *testing.T) {
	type call struct {
		counters []Counter
		refused  bool
		overs    string // per counter: o over, s over in shadow mode, . not
		used     []int64
	}
	c := func(name string, hits int64) Counter { return Counter{Name: name, Hits: hits} }
	q := func(name string, hits int64) Counter { return Counter{Name: name, Hits: hits, Quota: true} }
	for _, tc := range []struct {
		name     string
		opts     Options
		counting Counting
		calls    []call
	}{
		{"every hit counted, over the limit too", Options{}, CountEvery, []call{
			{[]Counter{c("w1", 3)}, true, "o", []int64{3}},
			{[]Counter{c("w1", 0)}, true, "o", []int64{3}}, // a check, over
		}},
		{"a refused call still counts its other counters", Options{}, CountEvery, []call{
			{[]Counter{c("deny", 1), c("w1", 1)}, true, "o.", []int64{1, 1}},
			{[]Counter{c("w1", 1)}, false, ".", []int64{2}},
		}},
		{"strict: a refused call counts nothing", Options{}, CountStrict, []call{
			{[]Counter{c("deny", 1), c("w1", 1)}, true, "o.", []int64{0, 0}},
			{[]Counter{c("w1", 3)}, true, "o", []int64{0}},
			{[]Counter{c("w1", 2)}, false, ".", []int64{2}},
		}},
		{"one counter twice counts twice, in order", Options{}, CountEvery, []call{
			{[]Counter{c("w1", 2), c("w1", 1)}, true, ".o", []int64{2, 3}},
		}},
		{"strict: more hits than a window holds, second: that one is over", Options{}, CountStrict, []call{
			{[]Counter{c("sched", 1), c("w1", 3)}, true, ".o", []int64{0, 0}},
		}},
		{"strict: one counter twice asks once", Options{}, CountStrict, []call{
			{[]Counter{c("w1", 1), c("w1", 1)}, false, "..", []int64{2, 2}},
		}},
		{"a limiter in shadow mode never refuses", Options{}, CountEvery, []call{
			{[]Counter{c("w2", 3), c("w1", 1)}, false, "s.", []int64{3, 1}},
			{[]Counter{c("w2", 1), c("deny", 1)}, true, "so", []int64{4, 1}},
		}},
		{"strict: shadow mode beside a refusal", Options{}, CountStrict, []call{
			{[]Counter{c("w2", 3), c("deny", 1)}, true, "so", []int64{0, 0}},
		}},
		{"global shadow: nothing refused, each counter says", Options{Shadow: true}, CountEvery, []call{
			{[]Counter{c("deny", 1), c("w1", 1)}, false, "o.", []int64{1, 1}},
		}},
		{"quota counters refuse together", Options{}, CountEvery, []call{
			{[]Counter{q("deny", 1), q("w1", 1)}, false, "o.", []int64{1, 1}},
			{[]Counter{q("deny", 1), q("w1", 2)}, true, "oo", []int64{2, 3}},
			{[]Counter{q("deny", 1), c("sched", 1)}, true, "o.", []int64{3, 0}},
		}},
		{"global quota: no limit takes part, unlimited does not", Options{QuotaMode: true}, CountEvery, []call{
			{[]Counter{c("deny", 1), {}}, false, "o.", []int64{1, 0}},
			{[]Counter{c("deny", 1), {Unlimited: true}}, true, "o.", []int64{2, 0}},
		}},
		{"a schedule takes hits as debt", Options{}, CountEvery, []call{
			{[]Counter{c("sched", 3)}, false, ".", nil},
			{[]Counter{c("sched", 0)}, true, "o", nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := countRig(t, tc.opts)
			for i, cl := range tc.calls {
				r, err := s.Count(context.Background(), CountRequest{Counters: cl.counters, Counting: tc.counting})
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if r.Refused != cl.refused || overs(r) != cl.overs {
					t.Errorf("call %d: refused %v, over %q; want %v, %q", i, r.Refused, overs(r), cl.refused, cl.overs)
				}
				for j, u := range cl.used {
					if r.Counts[j].Window && r.Counts[j].Used != u {
						t.Errorf("call %d: counter %d's count %d, want %d", i, j, r.Counts[j].Used, u)
					}
				}
				if tc.opts.Shadow && r.Shadowed != strings.Contains(overs(r), "o") {
					t.Errorf("call %d: shadowed %v", i, r.Shadowed)
				}
			}
		})
	}
}

// The reset of a window is its end on Redis' clock, also for a check of a
// window nothing counted yet, and a schedule that is over says when a new
// hit would fit.
func TestCountTimes(t *testing.T) {
	s := countRig(t, Options{})
	ctx := context.Background()
	r, err := s.Count(ctx, CountRequest{Counters: []Counter{{Name: "w1"}, {Name: "sched", Hits: 2}, {Name: "sched"}}})
	if err != nil {
		t.Fatal(err)
	}
	w, sch := r.Counts[0], r.Counts[2]
	if !w.Window || w.Reset-w.Now != int64(51e9) || w.Remaining != 2 || w.Limit != 2 {
		t.Errorf("window check: %+v, want its end 51 s away (t0 is 9 s into a minute), 2 of 2 left", w)
	}
	if !sch.Over || sch.RetryAfter != 2e9 {
		t.Errorf("schedule after 2 hits: %+v, want over for 2 s", sch)
	}
}

func TestCountErrors(t *testing.T) {
	s := countRig(t, Options{})
	ctx := context.Background()
	var fe *limiter.FieldError
	for _, tc := range []struct {
		req   CountRequest
		field string
	}{
		{CountRequest{Counters: []Counter{{Name: "w1", Hits: -1}}}, "counters[0].hits"},
		{CountRequest{Counters: []Counter{{Name: "bad name"}}}, "counters[0].name"},
		{CountRequest{Counters: []Counter{{Name: "w1", Unlimited: true}}}, "counters[0].unlimited"},
		{CountRequest{Counters: []Counter{{Name: "w1", Quota: true}}, Counting: CountStrict}, "counters[0].quota"},
		{CountRequest{Counters: make([]Counter, 1), Counting: Counting(9)}, ""},
	} {
		_, err := s.Count(ctx, tc.req)
		if tc.field == "" {
			continue // no named counter: nothing to decide, no error
		}
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want a field error naming %s", tc.req, err, tc.field)
		}
	}
	if _, err := s.Count(ctx, CountRequest{Counters: []Counter{{Name: "nobody", Hits: 1}}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a counter without a limiter: %v, want ErrNotFound", err)
	}
	strictQuota := over(s.store.backend, Options{QuotaMode: true})
	if _, err := strictQuota.Count(ctx, CountRequest{Counters: []Counter{{Name: "w1"}}, Counting: CountStrict}); !errors.As(err, &fe) || fe.Field != "counting" {
		t.Errorf("quota mode with strict counting: %v", err)
	}
}

func TestParseCounting(t *testing.T) {
	for _, c := range []Counting{CountEvery, CountStrict} {
		if got, err := ParseCounting(c.String()); err != nil || got != c {
			t.Errorf("%v: %v, %v", c, got, err)
		}
	}
	if _, err := ParseCounting("all"); err == nil {
		t.Error("all: no error")
	}
}

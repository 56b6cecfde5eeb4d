package limiter

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// A new rate kind is a row of the table and its engine: added here, and
// nothing else, it is known by name (Lookup, IsRate, Counts), its configs
// are checked with its own fields (another kind's are refused), it
// compiles, and Params dispatches every operation to its engine. (In Redis
// it is lua/<kind>.lua's row; docs/kinds.md lists the places a kind is
// written, and internal/layout's TestRateKindsNamedWhereDocumented checks
// that no other place names one.)
func TestFakeKindTouchesOnlyTheTable(t *testing.T) {
	var calls []string
	metronome := engine{
		acquire: func(p *Params, s *State, now, n, maxWait int64) Result {
			calls = append(calls, "acquire")
			start := max(s.Next, now)
			s.Next = start + n*p.Slice.Whole
			s.Permits += n
			return Result{Granted: start-now <= maxWait, Permits: n, Scheduled: start, Start: start, Delay: start - now}
		},
		charge: func(p *Params, s *State, now, n, maxWait int64) Result {
			calls = append(calls, "charge")
			return Result{Granted: true, Permits: n}
		},
		peek: func(p *Params, s *State, now int64) (int64, int64) {
			calls = append(calls, "peek")
			return 0, max(0, s.Next-now)
		},
		reset:  func(p *Params, s *State, now int64) { calls = append(calls, "reset"); s.Next = now },
		retune: func(s *State, now int64, old, new *Params) { calls = append(calls, "retune") },
		floor:  func(s *State, at int64) {},
	}
	row := KindInfo{Name: "metronome", Class: ClassRate, Code: 99, Fields: []string{"rate", "max_reserve", "shadow"},
		normalize: func(c *Config) error {
			if c.Rate <= 0 {
				return fieldErr("rate", "must be > 0", c.Rate)
			}
			return nil
		},
		compile: func(Config, *Params) {},
		engine:  &metronome,
	}
	saved := kinds
	kinds = append(slices.Clone(kinds), row)
	t.Cleanup(func() { kinds = saved })

	if _, ok := Lookup("metronome"); !ok || !IsRate("metronome") || IsLease("metronome") || Counts("metronome") {
		t.Fatalf("the table does not know the kind")
	}
	if !strings.Contains(kindRule(), "metronome") {
		t.Errorf("the kind rule %q does not name it", kindRule())
	}
	var fe *FieldError
	if _, _, err := (Config{Kind: "metronome", Rate: 5, Burst: B(2)}).Normalize(); !errors.As(err, &fe) || fe.Field != "burst" {
		t.Errorf("another kind's field: %v, want burst refused", err)
	}
	if _, _, err := (Config{Kind: "metronome"}).Normalize(); !errors.As(err, &fe) || fe.Field != "rate" {
		t.Errorf("its own check: %v, want rate refused", err)
	}
	p, err := Compile(Config{Kind: "metronome", Rate: 4})
	if err != nil {
		t.Fatal(err)
	}
	var s State
	r, err := p.Acquire(&s, 1000, 2, Forever)
	if err != nil || !r.Granted || r.Start != 1000 {
		t.Fatalf("acquire: %+v, %v", r, err)
	}
	if r, _ := p.Acquire(&s, 1000, 1, 0); r.Granted || r.Delay != 500_000_000 {
		t.Errorf("the next, without waiting: %+v, want refused for 0.5 s", r)
	}
	p.Peek(s, 1000)
	p.Reset(&s, 2000)
	if _, err := p.Charge(&s, 2000, 3, 0); err != nil {
		t.Fatal(err)
	}
	next, _ := Compile(Config{Kind: "metronome", Rate: 8})
	Reconfigure(&s, 3000, &p, &next)
	want := []string{"acquire", "acquire", "peek", "reset", "charge", "peek", "retune"}
	if !slices.Equal(calls, want) {
		t.Errorf("the engine saw %v, want %v", calls, want)
	}
}

package wire_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

// A grant's burst travels as a number, or "inf", and comes back the same.
func TestGrantBurst(t *testing.T) {
	for _, b := range []float64{1, 1.1, 2.5, math.Inf(1)} {
		in := wire.Grant{ID: "g1.x", Granted: true, Permits: 3, Burst: limiter.Burst(b)}
		raw, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if math.IsInf(b, 1) != strings.Contains(string(raw), `"burst":"inf"`) {
			t.Errorf("burst %v encodes as %s", b, raw)
		}
		var out wire.Grant
		if err := json.Unmarshal(raw, &out); err != nil || out != in {
			t.Errorf("burst %v: %s decodes as %+v (%v)", b, raw, out, err)
		}
	}
	var g wire.Grant
	if err := json.Unmarshal([]byte(`{"burst":"lots"}`), &g); err == nil {
		t.Errorf(`burst "lots" decoded as %v`, g.Burst)
	}
}

func TestProblem(t *testing.T) {
	p := wire.NewProblem(404, wire.ProblemNotFound, "no such limiter")
	raw, _ := json.Marshal(p)
	want := `{"type":"urn:limitd:problem:not-found","title":"Not found","status":404,"detail":"no such limiter"}`
	if string(raw) != want {
		t.Errorf("problem %s, want %s", raw, want)
	}
}

// AppendJSON writes what encoding/json writes, for every field.
func TestAppendJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := func() int64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return math.MinInt64 + r.Int64N(2)
		case 2:
			return math.MaxInt64 - r.Int64N(2)
		}
		return r.Int64() - math.MaxInt64/2
	}
	for range 1000 {
		g := wire.Granted{Granted: r.IntN(2) == 0, Permits: n(), Delay: n(), Scheduled: n(), Start: n(),
			Lateness: n(), Wait: n(), Version: n(), Now: n()}
		d := wire.Denied{Granted: r.IntN(2) == 0, RetryAfter: n(), Delay: n(), Wait: n(), Version: n(), Now: n()}
		w := wire.Window{Limit: n(), Remaining: n(), Reset: n(), ResetAt: n()}
		wg, wd := wire.WindowGranted{Granted: g, Window: w}, wire.WindowDenied{Denied: d, Window: w}
		for _, c := range []struct {
			v   any
			got []byte
		}{{g, g.AppendJSON([]byte("x"))}, {d, d.AppendJSON([]byte("x"))},
			{wg, wg.AppendJSON([]byte("x"))}, {wd, wd.AppendJSON([]byte("x"))}} {
			want, err := json.Marshal(c.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(c.got) != "x"+string(want) {
				t.Fatalf("AppendJSON(%+v) = %s, want x%s", c.v, c.got, want)
			}
		}
	}
}

// Answer reads every answer of an acquire of permits, each field where the
// answer has it.
func TestAnswerReadsEveryAnswer(t *testing.T) {
	g := wire.Granted{Granted: true, Permits: 2, Delay: 3, Scheduled: 4, Start: 5, Lateness: 6, Wait: 7, Version: 8, Now: 9}
	for _, c := range []struct {
		v    any
		want wire.Answer
	}{
		{g, wire.Answer{Shadowed: wire.Shadowed{Granted: g}}},
		{wire.Shadowed{Granted: g, Shadow: true, RetryAfter: 10}, wire.Answer{Shadowed: wire.Shadowed{Granted: g, Shadow: true, RetryAfter: 10}}},
		{wire.WindowDenied{Denied: wire.Denied{RetryAfter: 11, Delay: 12, Wait: 13, Version: 14, Now: 15}, Window: wire.Window{Limit: 16, Remaining: 0, Reset: 17, ResetAt: 18}},
			wire.Answer{Shadowed: wire.Shadowed{Granted: wire.Granted{Delay: 12, Wait: 13, Version: 14, Now: 15}, RetryAfter: 11}, Window: wire.Window{Limit: 16, Reset: 17, ResetAt: 18}}},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		var got wire.Answer
		if err := json.Unmarshal(b, &got); err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", b, got, err, c.want)
		}
	}
}

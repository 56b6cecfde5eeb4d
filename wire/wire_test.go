package wire_test

import (
	"encoding/json"
	"math"
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

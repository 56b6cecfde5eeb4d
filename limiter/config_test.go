package limiter

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// Limiter configs: Normalize / Validate, and the JSON and YAML forms.

func engF(v float64) *float64 { return &v }

func TestConfigNormalizeDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Config
		want Config
		verb Verb
	}{
		{"schedule: burst 1.1", Config{Rate: 100},
			Config{Kind: KindSchedule, Rate: 100, Burst: B(1.1)}, VerbStart},
		{"spec applied", Config{Spec: "100,2,restart"},
			Config{Kind: KindSchedule, Rate: 100, Burst: B(2)}, VerbRestart},
		{"spec with default burst", Config{Kind: KindSchedule, Spec: "5000/min"},
			Config{Kind: KindSchedule, Rate: 5000.0 / 60, Burst: B(1.1)}, VerbStart},
		{"spec inf configure", Config{Spec: "1K;inf:configure", MaxBacklog: D(time.Second)},
			Config{Kind: KindSchedule, Rate: 1000, Burst: B(Inf), MaxBacklog: D(time.Second)}, VerbConfigure},
		{"schedule kept", Config{Rate: 100, Burst: B(Inf), MaxBacklog: D(250 * time.Millisecond)},
			Config{Kind: KindSchedule, Rate: 100, Burst: B(Inf), MaxBacklog: D(250 * time.Millisecond)}, VerbStart},
		{"max_backlog 0 kept", Config{Rate: 100, Burst: B(1), MaxBacklog: D(0)},
			Config{Kind: KindSchedule, Rate: 100, Burst: B(1), MaxBacklog: D(0)}, VerbStart},
		{"smooth: 1 s burst, no initial permits", Config{Kind: KindSmooth, Rate: 5},
			Config{Kind: KindSmooth, Rate: 5, MaxBurstSeconds: engF(1), InitialPermits: engF(0)}, VerbStart},
		{"smooth metronome", Config{Kind: KindSmooth, Rate: 5, MaxBurstSeconds: engF(0), InitialPermits: engF(3)},
			Config{Kind: KindSmooth, Rate: 5, MaxBurstSeconds: engF(0), InitialPermits: engF(3)}, VerbStart},
		{"warm-up: cold factor 3, starts cold", Config{Kind: KindSmooth, Rate: 5, Warmup: D(4 * time.Second)},
			Config{Kind: KindSmooth, Rate: 5, Warmup: D(4 * time.Second), ColdFactor: engF(3)}, VerbStart},
		{"warm-up kept", Config{Kind: KindSmooth, Rate: 5, Warmup: D(time.Minute), ColdFactor: engF(10), InitialPermits: engF(2)},
			Config{Kind: KindSmooth, Rate: 5, Warmup: D(time.Minute), ColdFactor: engF(10), InitialPermits: engF(2)}, VerbStart},
		{"warm-up 0 is a metronome (Guava #2730)", Config{Kind: KindSmooth, Rate: 5, Warmup: D(0)},
			Config{Kind: KindSmooth, Rate: 5, MaxBurstSeconds: engF(0), InitialPermits: engF(0)}, VerbStart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, verb, err := tc.in.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) || verb != tc.verb {
				t.Errorf("Normalize(%s) =\n %s, %s\nwant\n %s, %s", engJSON(tc.in), engJSON(got), verb, engJSON(tc.want), tc.verb)
			}
			if err := tc.in.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			again, verb2, err := got.Normalize()
			if err != nil || !reflect.DeepEqual(again, got) || verb2 != VerbStart {
				t.Errorf("Normalize is not idempotent: %s → %s, %v", engJSON(got), engJSON(again), err)
			}
		})
	}
}

func engJSON(c Config) string {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Sprintf("%+v (%v)", c, err)
	}
	return string(b)
}

func TestConfigValidateErrors(t *testing.T) {
	smoothC := func(c Config) Config { c.Kind = KindSmooth; c.Rate = 5; return c }
	schedC := func(c Config) Config { c.Rate = 5; return c }
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "rate"},
		{Config{Rate: 0}, "rate"},
		{Config{Rate: -1}, "rate"},
		{Config{Rate: math.NaN()}, "rate"},
		{Config{Rate: math.Inf(1)}, "rate"},
		{Config{Rate: math.Inf(-1)}, "rate"},
		{Config{Rate: 1e9 + 1}, "rate"},
		{Config{Rate: 1e-7}, "rate"},
		{Config{Kind: KindSmooth, Rate: -5}, "rate"},
		{schedC(Config{Burst: B(0.5)}), "burst"},
		{schedC(Config{Burst: B(0)}), "burst"},
		{schedC(Config{Burst: B(math.NaN())}), "burst"},
		{schedC(Config{Burst: B(1e7)}), "burst"},
		{schedC(Config{Burst: B(math.Inf(-1))}), "burst"},
		{schedC(Config{MaxBacklog: D(-1)}), "max_backlog"},
		{schedC(Config{MaxBacklog: D(time.Duration(Horizon + 1))}), "max_backlog"},
		{smoothC(Config{Warmup: D(-time.Second)}), "warmup"},
		{smoothC(Config{Warmup: D(2e6 * time.Second)}), "warmup"},
		{smoothC(Config{Warmup: D(time.Duration(Horizon + 1))}), "warmup"},
		{smoothC(Config{MaxBurstSeconds: engF(-1)}), "max_burst_seconds"},
		{smoothC(Config{MaxBurstSeconds: engF(math.NaN())}), "max_burst_seconds"},
		{smoothC(Config{MaxBurstSeconds: engF(math.Inf(1))}), "max_burst_seconds"},
		{smoothC(Config{MaxBurstSeconds: engF(2e6)}), "max_burst_seconds"},
		{smoothC(Config{Warmup: D(time.Second), ColdFactor: engF(0.5)}), "cold_factor"},
		{smoothC(Config{Warmup: D(time.Second), ColdFactor: engF(math.NaN())}), "cold_factor"},
		{smoothC(Config{Warmup: D(time.Second), ColdFactor: engF(2e6)}), "cold_factor"},
		{smoothC(Config{ColdFactor: engF(3)}), "cold_factor"},
		{smoothC(Config{Warmup: D(0), ColdFactor: engF(3)}), "cold_factor"},
		{smoothC(Config{InitialPermits: engF(-1)}), "initial_permits"},
		{smoothC(Config{InitialPermits: engF(math.NaN())}), "initial_permits"},
		{smoothC(Config{InitialPermits: engF(math.Inf(1))}), "initial_permits"},
		{smoothC(Config{Warmup: D(time.Second), InitialPermits: engF(-1)}), "initial_permits"},
		{smoothC(Config{Warmup: D(time.Second), MaxBurstSeconds: engF(1)}), "warmup"},
		{smoothC(Config{Warmup: D(0), MaxBurstSeconds: engF(1)}), "warmup"},
		{Config{Kind: "bogus", Rate: 5}, "kind"},
		{Config{Kind: "Schedule", Rate: 5}, "kind"},
		// Fields of the other kind are rejected, so a typo in the kind cannot
		// silently drop a setting.
		{schedC(Config{Warmup: D(time.Second)}), "warmup"},
		{schedC(Config{MaxBurstSeconds: engF(1)}), "max_burst_seconds"},
		{schedC(Config{InitialPermits: engF(1)}), "initial_permits"},
		{schedC(Config{ColdFactor: engF(3)}), "cold_factor"},
		{smoothC(Config{Burst: B(2)}), "burst"},
		{smoothC(Config{MaxBacklog: D(time.Second)}), "max_backlog"},
		// A spec string is for a schedule, and excludes rate and burst.
		{Config{Spec: "100", Rate: 100}, "spec"},
		{Config{Spec: "100", Burst: B(2)}, "spec"},
		{Config{Kind: KindSmooth, Spec: "100"}, "spec"},
		{Config{Spec: "abc"}, "rate"},
		{Config{Spec: "100,0.5"}, "burst"},
		{Config{Spec: "100,2,jump"}, "spec.verb"},
		{Config{Spec: "100", Warmup: D(time.Second)}, "warmup"},
	} {
		what := engJSON(tc.cfg)
		engCheckFieldErr(t, "Validate("+what+")", tc.cfg.Validate(), tc.field, "")
		if n, _, err := tc.cfg.Normalize(); err == nil || !reflect.DeepEqual(n, Config{}) {
			t.Errorf("Normalize(%s) = %+v, %v; want a zero config and an error", what, n, err)
		}
		if _, err := Compile(tc.cfg); err == nil {
			t.Errorf("Compile(%s) accepted it", what)
		}
	}
}

// engRoundTripConfigs are normalized configs of every shape, plus random ones.
func engRoundTripConfigs(t *testing.T) []Config {
	cs := []Config{
		{Spec: "12000,1.1,restart"},
		{Spec: "100,inf", MaxBacklog: D(250 * time.Millisecond)},
		{Rate: 1e-6, Burst: B(1e6), MaxBacklog: D(time.Duration(Horizon))},
		{Rate: 5000.0 / 60, Burst: B(1), MaxBacklog: D(0)},
		{Rate: 123456.789},
		{Kind: KindSmooth, Rate: 5},
		{Kind: KindSmooth, Rate: 1e9, MaxBurstSeconds: engF(0.25), InitialPermits: engF(7)},
		{Kind: KindSmooth, Rate: 2, Warmup: D(4 * time.Second)},
		{Kind: KindSmooth, Rate: 2, Warmup: D(1500 * time.Microsecond), ColdFactor: engF(10), InitialPermits: engF(0)},
		{Kind: KindSmooth, Rate: 5, Warmup: D(0)},
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for range 200 {
		cs = append(cs, engRandScheduleConfig(rng), engRandSmoothConfig(rng))
	}
	out := make([]Config, 0, len(cs))
	for _, c := range cs {
		n, _, err := c.Normalize()
		if err != nil {
			t.Fatalf("Normalize(%+v): %v", c, err)
		}
		out = append(out, n)
	}
	return out
}

func TestConfigNormalizeIdempotent(t *testing.T) {
	for _, n := range engRoundTripConfigs(t) {
		again, _, err := n.Normalize()
		if err != nil || !reflect.DeepEqual(again, n) {
			t.Fatalf("Normalize(%s) = %s, %v; want it unchanged", engJSON(n), engJSON(again), err)
		}
		p1, err1 := Compile(n)
		p2, err2 := Compile(again)
		if err1 != nil || err2 != nil || p1 != p2 {
			t.Fatalf("Compile differs for %s", engJSON(n))
		}
	}
}

func TestConfigJSONRoundTrip(t *testing.T) {
	for _, n := range engRoundTripConfigs(t) {
		b, err := json.Marshal(n)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", n, err)
		}
		var back Config
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", b, err)
		}
		if !reflect.DeepEqual(back, n) {
			t.Fatalf("JSON round trip: %s → %s", b, engJSON(back))
		}
	}
	n, _, _ := Config{Spec: "100,inf", MaxBacklog: D(250 * time.Millisecond)}.Normalize()
	if b, _ := json.Marshal(n); string(b) != `{"kind":"schedule","rate":100,"burst":"inf","max_backlog":"250ms"}` {
		t.Errorf("JSON form: %s", b)
	}
	w, _, _ := Config{Kind: KindSmooth, Rate: 2, Warmup: D(4 * time.Second)}.Normalize()
	if b, _ := json.Marshal(w); string(b) != `{"kind":"smooth","rate":2,"warmup":"4s","cold_factor":3}` {
		t.Errorf("JSON form: %s", b)
	}
	for in, want := range map[string]Config{
		`{"rate":100,"burst":"inf"}`:               {Rate: 100, Burst: B(Inf)},
		`{"rate":100,"burst":"+inf"}`:              {Rate: 100, Burst: B(Inf)},
		`{"rate":100,"burst":1.5}`:                 {Rate: 100, Burst: B(1.5)},
		`{"spec":"1000,inf,restart"}`:              {Spec: "1000,inf,restart"},
		`{"rate":1,"max_backlog":"1h30m"}`:         {Rate: 1, MaxBacklog: D(90 * time.Minute)},
		`{"kind":"smooth","rate":1,"warmup":"0s"}`: {Kind: KindSmooth, Rate: 1, Warmup: D(0)},
	} {
		var got Config
		if err := json.Unmarshal([]byte(in), &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Unmarshal(%s) = %s, %v; want %s", in, engJSON(got), err, engJSON(want))
		}
	}
}

// TestConfigJSONBadValues: a bad duration or burst in JSON is a
// json.UnmarshalTypeError whose Field is the field's JSON name, so the API can
// say which field is wrong.
func TestConfigJSONBadValues(t *testing.T) {
	for in, field := range map[string]string{
		`{"rate":5,"max_backlog":"250 ms"}`:                  "max_backlog",
		`{"rate":5,"max_backlog":"-"}`:                       "max_backlog",
		`{"rate":5,"max_backlog":250}`:                       "max_backlog",
		`{"rate":5,"max_backlog":null,"burst":"lots"}`:       "burst",
		`{"rate":5,"burst":true}`:                            "burst",
		`{"rate":5,"burst":"Infinity"}`:                      "burst",
		`{"kind":"smooth","rate":5,"warmup":"4 seconds"}`:    "warmup",
		`{"kind":"smooth","rate":5,"warmup":{"s":4}}`:        "warmup",
		`{"kind":"smooth","rate":5,"max_burst_seconds":"1"}`: "max_burst_seconds",
	} {
		var c Config
		err := json.Unmarshal([]byte(in), &c)
		var ute *json.UnmarshalTypeError
		if !errors.As(err, &ute) || ute.Field != field {
			t.Errorf("Unmarshal(%s): error %v (%#v), want a json.UnmarshalTypeError on field %q", in, err, ute, field)
		}
	}
}

func TestConfigYAMLRoundTrip(t *testing.T) {
	for _, n := range engRoundTripConfigs(t) {
		b, err := yaml.Marshal(n)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", n, err)
		}
		var back Config
		if err := yaml.Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", b, err)
		}
		if !reflect.DeepEqual(back, n) {
			t.Fatalf("YAML round trip:\n%s→ %s, want %s", b, engJSON(back), engJSON(n))
		}
	}
	n, _, _ := Config{Spec: "100,inf", MaxBacklog: D(250 * time.Millisecond)}.Normalize()
	b, _ := yaml.Marshal(n)
	if want := "kind: schedule\nrate: 100\nburst: inf\nmax_backlog: 250ms\n"; string(b) != want {
		t.Errorf("YAML form:\n%s\nwant\n%s", b, want)
	}
	doc := `
kind: smooth
rate: 2
warmup: 4s
cold_factor: 10
`
	var c Config
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	if want := (Config{Kind: KindSmooth, Rate: 2, Warmup: D(4 * time.Second), ColdFactor: engF(10)}); !reflect.DeepEqual(c, want) {
		t.Errorf("YAML decode: %s", engJSON(c))
	}
	var s Config
	if err := yaml.Unmarshal([]byte("spec: 12000,1.1,restart\nmax_backlog: 1s\n"), &s); err != nil || s.Spec != "12000,1.1,restart" {
		t.Errorf("YAML spec: %+v, %v", s, err)
	}
}

func TestConfigYAMLBadValues(t *testing.T) {
	for _, in := range []string{
		"rate: 5\nmax_backlog: 5\n",
		"rate: 5\nmax_backlog: five seconds\n",
		"rate: 5\nmax_backlog: [1s]\n",
		"rate: 5\nburst: lots\n",
		"rate: 5\nburst: 0.5\n",
		"rate: 5\nburst: {a: 1}\n",
		"kind: smooth\nrate: 5\nwarmup: 4\n",
	} {
		var c Config
		err := yaml.Unmarshal([]byte(in), &c)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("yaml.Unmarshal(%q): error %v, want ErrInvalid", in, err)
		} else if !strings.Contains(err.Error(), "duration") && !strings.Contains(err.Error(), "burst") {
			t.Errorf("yaml.Unmarshal(%q): error %q does not say what is wrong", in, err)
		}
	}
}

package limiter

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// guavaRun replays one of Guava's RateLimiterTest sequences against an engine.
// Steps: "A<n>" acquires n permits (the caller then sleeps the returned delay,
// as Guava's acquire does), "U<seconds>" sleeps, "S<rate>" sets the rate
// keeping state. It returns the delays as Guava prints them: "R%.2f".
func guavaRun(t *testing.T, c Config, steps string) string {
	t.Helper()
	p, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	var s State
	var now int64 = 1_000_000_000 // an arbitrary non-zero start
	if p.StartsAtCreation() {
		p.Start(&s, now)
	}
	var out []string
	for _, step := range strings.Fields(steps) {
		var v float64
		if _, err := fmt.Sscanf(step[1:], "%g", &v); err != nil {
			t.Fatalf("bad step %q", step)
		}
		switch step[0] {
		case 'A':
			r, err := p.Acquire(&s, now, int64(v), Forever)
			if err != nil || !r.Granted {
				t.Fatalf("acquire %v: %+v %v", v, r, err)
			}
			out = append(out, fmt.Sprintf("R%.2f", roundHalfUp(float64(r.Delay)/1e9)))
			now += r.Delay
		case 'U':
			now += int64(v * 1e9)
			out = append(out, step)
		case 'S':
			c.Rate = v
			np, err := Compile(c)
			if err != nil {
				t.Fatal(err)
			}
			Reconfigure(&s, now, &p, &np)
			p = np
		}
	}
	return strings.Join(out, " ")
}

// roundHalfUp rounds to 2 decimals with ties up (1.125 → 1.13), as the vectors print.
func roundHalfUp(x float64) float64 { return math.Floor(x*100+0.5+1e-9) / 100 }

func smooth(rate float64) Config { return Config{Kind: KindSmooth, Rate: rate} }

func warm(rate float64, warmup time.Duration, cold float64) Config {
	return Config{Kind: KindSmooth, Rate: rate, Warmup: D(warmup), ColdFactor: &cold}
}

func TestGuavaVectors(t *testing.T) {
	burst := func(rate, secs float64) Config {
		return Config{Kind: KindSmooth, Rate: rate, MaxBurstSeconds: &secs}
	}
	eight := "A1 A1 A1 A1 A1 A1 A1 A1"
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps string
		want  string
	}{
		{"simple", smooth(5), "A1 A1 A1", "R0.00 R0.20 R0.20"},
		{"simple with sleep", smooth(5), "A1 U0.2 A1 A1", "R0.00 U0.2 R0.00 R0.20"},
		{"one second burst", burst(5, 1), "U1 U1 A1 A1 A3 A1 A1",
			"U1 U1 R0.00 R0.00 R0.00 R0.00 R0.20"},
		{"warm-up", warm(2, 4*time.Second, 3), eight,
			"R0.00 R1.38 R1.13 R0.88 R0.63 R0.50 R0.50 R0.50"},
		{"warm-up after a long sleep", warm(2, 4*time.Second, 3), eight + " U0.5 U4 " + eight,
			"R0.00 R1.38 R1.13 R0.88 R0.63 R0.50 R0.50 R0.50 U0.5 U4 R0.00 R1.38 R1.13 R0.88 R0.63 R0.50 R0.50 R0.50"},
		{"warm-up after a short sleep", warm(2, 4*time.Second, 3), eight + " U0.5 U2 " + eight,
			"R0.00 R1.38 R1.13 R0.88 R0.63 R0.50 R0.50 R0.50 U0.5 U2 R0.00 R0.50 R0.50 R0.50 R0.50 R0.50 R0.50 R0.50"},
		{"warm-up cold factor 10", warm(5, 4*time.Second, 10), eight,
			"R0.00 R1.75 R1.26 R0.76 R0.30 R0.20 R0.20 R0.20"},
		{"set rate", smooth(1), "A1 A1 S2 A1 A2 A4 A1",
			"R0.00 R1.00 R1.00 R0.50 R1.00 R2.00"},
		{"weights", smooth(1), "A1 A1 A2 A4 A8 A1",
			"R0.00 R1.00 R1.00 R2.00 R4.00 R8.00"},
		{"warm-up and set rate", warm(2, 4*time.Second, 3),
			eight + " U4.5 A1 A1 A1 S4 A1 A1 A1 A1 A1 U4.25 " + eight + " A1 A1 A1",
			"R0.00 R1.38 R1.13 R0.88 R0.63 R0.50 R0.50 R0.50 U4.5 R0.00 R1.38 R1.13 R0.88 R0.34 R0.28 R0.25 R0.25 " +
				"U4.25 R0.00 R0.72 R0.66 R0.59 R0.53 R0.47 R0.41 R0.34 R0.28 R0.25 R0.25"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := guavaRun(t, tc.cfg, tc.steps); got != tc.want {
				t.Errorf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

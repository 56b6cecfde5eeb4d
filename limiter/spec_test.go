package limiter

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// Rate spec strings (DESIGN §4).

// engCheckFieldErr checks that err is an ErrInvalid *FieldError on field whose
// message quotes the part at fault (mention, if not empty).
func engCheckFieldErr(t *testing.T, what string, err error, field, mention string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one on %s", what, field)
		return
	}
	var fe *FieldError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) {
		t.Errorf("%s: error %v (%T) is not an ErrInvalid *FieldError", what, err, err)
		return
	}
	if fe.Field != field {
		t.Errorf("%s: error %q names field %q, want %q", what, err, fe.Field, field)
	}
	if !strings.HasPrefix(err.Error(), field+":") || mention != "" && !strings.Contains(err.Error(), mention) {
		t.Errorf("%s: error %q should name %s and the bad part %q", what, err, field, mention)
	}
}

func TestParseSpec(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		in   string
		want Spec
	}{
		{"523", Spec{523, 1.1, VerbStart}},
		{"12345,1.4,restart", Spec{12345, 1.4, VerbRestart}},
		{"12000;1.1:configure", Spec{12000, 1.1, VerbConfigure}},
		{"12000:1.1;restart", Spec{12000, 1.1, VerbRestart}},
		{"12000,1.1,start", Spec{12000, 1.1, VerbStart}},
		{"12000,1.1,START", Spec{12000, 1.1, VerbStart}},
		{" 100 , 1.2 , Restart ", Spec{100, 1.2, VerbRestart}},
		{"1.5K;inf", Spec{1500, inf, VerbStart}},
		{"100,+inf", Spec{100, inf, VerbStart}},
		{"100,INF", Spec{100, inf, VerbStart}},
		{"100,1", Spec{100, 1, VerbStart}},
		{"100,1e6", Spec{100, 1e6, VerbStart}},
		{"1K", Spec{1e3, 1.1, VerbStart}},
		{"1.5k", Spec{1.5e3, 1.1, VerbStart}},
		{"2M", Spec{2e6, 1.1, VerbStart}},
		{"1G", Spec{1e9, 1.1, VerbStart}},
		{"1B", Spec{1e9, 1.1, VerbStart}},
		{"0.001T", Spec{1e9, 1.1, VerbStart}},
		{"2^20", Spec{1 << 20, 1.1, VerbStart}},
		{"10^3,2", Spec{1000, 2, VerbStart}},
		{"2^-1", Spec{0.5, 1.1, VerbStart}},
		{"100/s", Spec{100, 1.1, VerbStart}},
		{"1/sec", Spec{1, 1.1, VerbStart}},
		{"5000/min", Spec{5000.0 / 60, 1.1, VerbStart}},
		{"90/minute;1.05", Spec{1.5, 1.05, VerbStart}},
		{"1/h", Spec{1.0 / 3600, 1.1, VerbStart}},
		{"7200/hour,1,restart", Spec{2, 1, VerbRestart}},
		{"1e9", Spec{1e9, 1.1, VerbStart}},
		{"1e-6", Spec{1e-6, 1.1, VerbStart}},
		{"0.000001", Spec{1e-6, 1.1, VerbStart}},
		{"+5", Spec{5, 1.1, VerbStart}},
		{".5", Spec{0.5, 1.1, VerbStart}},
	} {
		got, err := ParseSpec(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		in, field, mention string
	}{
		{"", "spec", `""`},
		{"   ", "spec", `"   "`},
		{",", "spec", `","`},
		{"abc", "rate", `"abc"`},
		{"-5", "rate", "-5"},
		{"0", "rate", "0"},
		{"NaN", "rate", "NaN"},
		{"nan", "rate", "nan"},
		{"inf", "rate", "inf"},
		{"1e10", "rate", "1e+10"},
		{"1e-7", "rate", "1e-07"},
		{"1e400", "rate", "1e400"},
		{"0x10", "rate", "0x10"},
		{"1 000", "rate", "1 000"},
		{"--5", "rate", "--5"},
		{"K", "rate", `"K"`},
		{"5X", "rate", "5X"},
		{"2^", "rate", "2^"},
		{"2^1000", "rate", "e+301"},
		{"-1^0.5", "rate", "NaN"},
		{"/s", "rate", "/s"},
		{"5/fortnight", "rate", "fortnight"},
		{"5/", "rate", "5/"},
		{"1,0.5", "burst", "0.5"},
		{"1,0", "burst", `"0"`},
		{"1,abc", "burst", "abc"},
		{"1,NaN", "burst", "NaN"},
		{"1,1e7", "burst", "1e7"},
		{"1,-inf", "burst", "-inf"},
		{"1,infinity", "burst", "infinity"},
		{"1,2,jump", "spec.verb", "jump"},
		{"1,2,3", "spec.verb", `"3"`},
		{"1,2,3,4", "spec", "1,2,3,4"},
		{"1,2,restart,x", "spec", "restart,x"},
		// An empty part is an error, not a reason to shift the others (nosqlbench
		// rejects these too): "5,,1.2" must not parse as burst 1.2.
		{"1,,restart", "burst", ""},
		{"5,,1.2", "burst", ""},
		{",5", "rate", ""},
	} {
		sp, err := ParseSpec(tc.in)
		if err == nil {
			t.Errorf("ParseSpec(%q) = %+v, want an error on %s", tc.in, sp, tc.field)
			continue
		}
		engCheckFieldErr(t, "ParseSpec("+tc.in+")", err, tc.field, tc.mention)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{
		"523": 523, "1.5K": 1500, " 2M ": 2e6, "2^20": 1 << 20, "100/s": 100, "5000/min": 5000.0 / 60,
		"1/h": 1.0 / 3600, "1/ H": 1.0 / 3600, "60/m": 1, "1e9": MaxRate, "1e-6": MinRate, "1 K": 1000,
	} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", " ", "x", "1e9.0000001", "1000000001", "9.99e-7", "1,5", "1/d", "/", "^", "1^x", "Inf", "+Inf", "0/s", "-1/s"} {
		_, err := ParseRate(in)
		engCheckFieldErr(t, "ParseRate("+in+")", err, "rate", "")
	}
	// FormatRate gives ParseRate the same float64 back.
	rng := rand.New(rand.NewPCG(4, 4))
	for range 2000 {
		r := MinRate * math.Pow(10, 15*rng.Float64())
		if got, err := ParseRate(FormatRate(r)); err != nil || got != r {
			t.Fatalf("ParseRate(FormatRate(%v) = %q) = %v, %v", r, FormatRate(r), got, err)
		}
	}
}

func TestParseBurst(t *testing.T) {
	inf := math.Inf(1)
	for in, want := range map[string]float64{"1": 1, "1.1": 1.1, " 2 ": 2, "1e6": 1e6, "inf": inf, "INF": inf, "+inf": inf, " Inf ": inf} {
		if got, err := ParseBurst(in); err != nil || got != want {
			t.Errorf("ParseBurst(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0.99", "0", "-1", "nan", "NaN", "1e7", "1000001", "-inf", "infinity", "abc", "1.1x", "1,1"} {
		_, err := ParseBurst(in)
		engCheckFieldErr(t, "ParseBurst("+in+")", err, "burst", in)
	}
}

func TestSpecStringRoundTrip(t *testing.T) {
	for _, in := range []string{"523", "12345,1.4,restart", "12000;1.1:configure", "1.5K;inf", "5000/min", "1/h", "2^20,1", "1e-6,1e6"} {
		sp, err := ParseSpec(in)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseSpec(sp.String())
		if err != nil || back != sp {
			t.Errorf("%q → %q → %+v, %v; want %+v", in, sp.String(), back, err, sp)
		}
	}
	if got := (Spec{Rate: 12000, Burst: 1.1, Verb: VerbRestart}).String(); got != "12000,1.1,restart" {
		t.Errorf("String() = %q", got)
	}
	if got := (Spec{Rate: 1e9, Burst: math.Inf(1), Verb: VerbStart}).String(); got != "1e+09,inf,start" {
		t.Errorf("String() = %q", got)
	}
}

// FuzzParseSpec: ParseSpec never panics; an error is an ErrInvalid *FieldError
// naming a field; a spec it accepts has a rate in [MinRate, MaxRate], a burst
// ≥ 1, a known verb, formats to a string that parses back to the same spec, and
// compiles into a limiter that grants a permit.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"523", "12345,1.4,restart", "12000;1.1:configure", "1.5K;inf", "2^20", "100/s", "5000/min", "1/h",
		"", ",", "abc", "-5", "0", "NaN", "inf", "1e10", "5/fortnight", "1,0.5", "1,2,jump", "1,2,3,4",
		"5,,1.2", "1e-6,1e6,start", "0.001T:+inf", "10^-6", "1e9/s", "\xff", "1\x00", "٣",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sp, err := ParseSpec(s)
		if err != nil {
			var fe *FieldError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field == "" || fe.Rule == "" {
				t.Fatalf("ParseSpec(%q): error %v (%T) is not an ErrInvalid *FieldError", s, err, err)
			}
			return
		}
		if !(sp.Rate >= MinRate && sp.Rate <= MaxRate) {
			t.Fatalf("ParseSpec(%q): rate %v outside [MinRate, MaxRate]", s, sp.Rate)
		}
		if !(sp.Burst >= 1) || sp.Burst > MaxBurst && !math.IsInf(sp.Burst, 1) {
			t.Fatalf("ParseSpec(%q): burst %v", s, sp.Burst)
		}
		if sp.Verb != VerbStart && sp.Verb != VerbConfigure && sp.Verb != VerbRestart {
			t.Fatalf("ParseSpec(%q): verb %q", s, sp.Verb)
		}
		back, err := ParseSpec(sp.String())
		if err != nil || back != sp {
			t.Fatalf("ParseSpec(%q) = %+v; its String %q parses to %+v, %v", s, sp, sp.String(), back, err)
		}
		p, err := Compile(Config{Spec: s})
		if err != nil {
			t.Fatalf("Compile(Config{Spec: %q}): %v", s, err)
		}
		var st State
		if r, err := p.Acquire(&st, 1, 1, 0); err != nil || !r.Granted {
			t.Fatalf("spec %q: first permit %+v, %v", s, r, err)
		}
	})
}

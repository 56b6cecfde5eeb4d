package limiter

import (
	"errors"
	"testing"
	"time"
)

func windowParamsOf(t *testing.T, c Config) Params {
	t.Helper()
	c.Kind = KindWindow
	p, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func limitOf(v int64) *int64 { return &v }

// A fixed window is aligned to the Unix epoch: the count starts over at each
// multiple of the period, whatever the time of the first call.
func TestWindowFixedEpochAligned(t *testing.T) {
	p := windowParamsOf(t, Config{Limit: limitOf(3), Period: "1m"})
	base := int64(1_700_000_040) * 1e9 // a whole minute
	var s State
	for i, tc := range []struct {
		at      int64
		n       int64
		granted bool
		left    int64
		retry   int64
	}{
		{base + 50e9, 2, true, 1, 0},
		{base + 55e9, 2, false, 1, 5e9}, // the window ends at base + 60 s
		{base + 59e9, 1, true, 0, 0},
		{base + 59_999_999_999, 1, false, 0, 1},
		{base + 60e9, 3, true, 0, 0}, // a new window
		{base + 119e9, 1, false, 0, 1e9},
	} {
		r, err := p.Acquire(&s, tc.at, tc.n, Forever)
		if err != nil {
			t.Fatal(err)
		}
		if r.Granted != tc.granted || r.Wait != tc.left || r.RetryAfter != tc.retry {
			t.Errorf("%d: %+v, want granted %v, left %d, retry %d", i, r, tc.granted, tc.left, tc.retry)
		}
		if r.Granted && (r.Start != tc.at || r.Delay != 0) {
			t.Errorf("%d: a window grants now only: %+v", i, r)
		}
	}
	if s.Next != base+120e9 {
		t.Errorf("next = %d, want the window's end %d", s.Next, base+120e9)
	}
	if _, err := p.Acquire(&s, base+200e9, 4, Forever); err == nil {
		t.Error("4 permits of a limit of 3: want an out-of-range error")
	}
}

// used and retry agree: a denied sliding request is granted at the retry
// instant it was told (nobody else asking) and not one µs before.
func TestWindowSlidingRetryExact(t *testing.T) {
	for _, c := range []struct {
		limit  int64
		period string
	}{{10, "1s"}, {7, "3ms"}, {1000, "1h"}, {3, "2400h"}} {
		p := windowParamsOf(t, Config{Limit: limitOf(c.limit), Period: c.period, Sliding: true})
		start := int64(1_700_000_000) * 1e9
		start -= start % p.Period
		var s State
		// fill the first window at its start, then ask in the next
		if r, _ := p.Acquire(&s, start, c.limit, 0); !r.Granted {
			t.Fatalf("%v: the first window's permits refused: %+v", c, r)
		}
		for _, n := range []int64{1, c.limit / 2, c.limit} {
			if n < 1 {
				continue
			}
			at := start + p.Period + p.Period/3 + 1234
			before := s
			r, _ := p.Acquire(&s, at, n, 0)
			if r.Granted {
				s = before
				continue
			}
			rolled := before
			p.roll(&rolled, at, true)
			if s != rolled { // rolling depends on time alone
				t.Errorf("%v: a denied request changed more than the window", c)
			}
			when := at + r.RetryAfter
			if u := p.used(&s, when); u+n > c.limit {
				t.Errorf("%v n %d: at the retry instant used %d", c, n, u)
			}
			if u := p.used(&s, when-1000); u+n <= c.limit && when-1000 >= s.Next-p.Period {
				t.Errorf("%v n %d: granted already 1µs before the retry instant (used %d)", c, n, u)
			}
			if g, _ := p.Acquire(&s, when, n, 0); !g.Granted {
				t.Errorf("%v n %d: refused at the retry instant: %+v", c, n, g)
			}
			s = before
		}
	}
}

// The sliding count weighs the previous window by the part of it still
// inside the period, in whole µs.
func TestWindowSlidingWeight(t *testing.T) {
	p := windowParamsOf(t, Config{Limit: limitOf(100), Period: "10s", Sliding: true})
	w := int64(1_700_000_000) * 1e9
	var s State
	if r, _ := p.Acquire(&s, w+1e9, 60, 0); !r.Granted {
		t.Fatal(r)
	}
	// 2.5 s into the next window: 60 · 7.5 / 10 = 45 still count
	r, _ := p.Acquire(&s, w+12_500_000_000, 55, 0)
	if !r.Granted || r.Wait != 0 {
		t.Fatalf("55 of the 55 left: %+v", r)
	}
	// a window later, the previous (55) weighs 55 · (10 − 7.5) / 10 = 13.75 → 13
	r, _ = p.Acquire(&s, w+27_500_000_000, 87, 0)
	if !r.Granted || r.Wait != 0 {
		t.Fatalf("87 of 87 left: %+v", r)
	}
	// after a gap of more than a window, nothing of the past counts
	r, _ = p.Acquire(&s, w+50e9, 100, 0)
	if !r.Granted {
		t.Fatalf("a fresh window after a gap: %+v", r)
	}
}

func TestCalendarWindows(t *testing.T) {
	at := func(zone, s string) int64 {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return v.UnixNano()
	}
	for _, c := range []struct {
		cal        Calendar
		zone, now  string
		start, end string
		hours      float64 // the window's length
	}{
		{Day, "Europe/Berlin", "2025-03-30 12:00", "2025-03-30 00:00", "2025-03-31 00:00", 23},
		{Day, "Europe/Berlin", "2025-10-26 01:00", "2025-10-26 00:00", "2025-10-27 00:00", 25},
		{Day, "America/New_York", "2025-03-09 23:59", "2025-03-09 00:00", "2025-03-10 00:00", 23},
		{Day, "America/New_York", "2025-11-02 00:30", "2025-11-02 00:00", "2025-11-03 00:00", 25},
		{Day, "UTC", "2024-02-29 13:00", "2024-02-29 00:00", "2024-03-01 00:00", 24},
		{Week, "UTC", "2024-03-03 10:00", "2024-02-26 00:00", "2024-03-04 00:00", 168}, // a Sunday; Monday 26 Feb, over the leap day
		{Week, "Europe/Berlin", "2025-03-31 00:00", "2025-03-31 00:00", "2025-04-07 00:00", 168},
		{Week, "Europe/Berlin", "2025-03-30 23:59", "2025-03-24 00:00", "2025-03-31 00:00", 167},
		{Month, "UTC", "2024-02-29 23:59", "2024-02-01 00:00", "2024-03-01 00:00", 29 * 24},
		{Month, "UTC", "2023-02-28 23:59", "2023-02-01 00:00", "2023-03-01 00:00", 28 * 24},
		{Month, "America/New_York", "2025-11-30 23:00", "2025-11-01 00:00", "2025-12-01 00:00", 30*24 + 1},
		{Month, "UTC", "2025-12-31 23:59", "2025-12-01 00:00", "2026-01-01 00:00", 31 * 24},
		{Year, "UTC", "2024-07-01 00:00", "2024-01-01 00:00", "2025-01-01 00:00", 366 * 24},
		{Year, "Europe/Berlin", "2025-01-01 00:00", "2025-01-01 00:00", "2026-01-01 00:00", 365 * 24},
		// Midnight does not exist here (clocks went from 00:00 to 01:00):
		// the day starts at 01:00.
		{Day, "America/Havana", "2024-03-10 12:00", "2024-03-10 01:00", "2024-03-11 00:00", 23},
	} {
		now := at(c.zone, c.now)
		s, e, err := CalendarWindow(c.cal, c.zone, now)
		if err != nil {
			t.Fatal(err)
		}
		if s != at(c.zone, c.start) || e != at(c.zone, c.end) {
			t.Errorf("%v %s %s: [%s, %s), want [%s, %s)", c.cal, c.zone, c.now,
				time.Unix(0, s).In(time.UTC), time.Unix(0, e).In(time.UTC), c.start, c.end)
		}
		if got := time.Duration(e - s).Hours(); got != c.hours {
			t.Errorf("%v %s %s: %v hours, want %v", c.cal, c.zone, c.now, got, c.hours)
		}
		if now < s || now >= e {
			t.Errorf("%v %s %s: the window does not contain now", c.cal, c.zone, c.now)
		}
	}
}

// A calendar window resets at the local boundary.
func TestWindowCalendarResets(t *testing.T) {
	p := windowParamsOf(t, Config{Limit: limitOf(2), Period: "day", Zone: "Europe/Berlin"})
	loc, _ := time.LoadLocation("Europe/Berlin")
	day := time.Date(2025, 10, 25, 23, 0, 0, 0, loc).UnixNano()
	var s State
	p.Acquire(&s, day, 2, 0)
	r, _ := p.Acquire(&s, day+int64(30*time.Minute), 1, 0)
	if r.Granted || r.RetryAfter != int64(30*time.Minute) {
		t.Fatalf("want a refusal until midnight: %+v", r)
	}
	// the day of the change is 25 hours long
	mid := time.Date(2025, 10, 26, 0, 0, 0, 0, loc).UnixNano()
	p.Acquire(&s, mid, 2, 0)
	r, _ = p.Acquire(&s, mid+int64(24*time.Hour), 1, 0)
	if r.Granted || r.RetryAfter != int64(time.Hour) {
		t.Fatalf("24 h after midnight on a 25 h day: %+v", r)
	}
}

func TestWindowConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{Period: "1m"}, "limit"},
		{Config{Limit: limitOf(-1), Period: "1m"}, "limit"},
		{Config{Limit: limitOf(1 << 32), Period: "1m"}, "limit"},
		{Config{Limit: limitOf(1)}, "period"},
		{Config{Limit: limitOf(1), Period: "fortnight"}, "period"},
		{Config{Limit: limitOf(1), Period: "1500ns"}, "period"},
		{Config{Limit: limitOf(1), Period: "-1s"}, "period"},
		{Config{Limit: limitOf(1), Period: "9000h"}, "period"},
		{Config{Limit: limitOf(1), Period: "month", Sliding: true}, "sliding"},
		{Config{Limit: limitOf(1), Period: "2401h", Sliding: true}, "sliding"},
		{Config{Limit: limitOf(1), Period: "day", Zone: "Mars/Olympus"}, "zone"},
		{Config{Limit: limitOf(1), Period: "day", Zone: "Local"}, "zone"},
		{Config{Limit: limitOf(1), Period: "1h", Zone: "UTC"}, "zone"},
		{Config{Limit: limitOf(1), Period: "1h", Rate: 5}, "rate"},
	} {
		c.cfg.Kind = KindWindow
		_, _, err := c.cfg.Normalize()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.field)
		}
	}
	for _, l := range []int64{0, 1<<32 - 1} { // a deny-all rule, and the most a uint32 says
		if _, err := Compile(Config{Kind: KindWindow, Limit: limitOf(l), Period: "1m"}); err != nil {
			t.Errorf("limit %d: %v", l, err)
		}
	}
	n, _, err := Config{Kind: KindWindow, Limit: limitOf(5), Period: "60s"}.Normalize()
	if err != nil || n.Period != "1m0s" || n.Zone != "" {
		t.Errorf("canonical duration period: %+v %v", n, err)
	}
	n, _, err = Config{Kind: KindWindow, Limit: limitOf(5), Period: "Week"}.Normalize()
	if err != nil || n.Zone != "UTC" {
		t.Errorf("a calendar period's zone defaults to UTC: %+v %v", n, err)
	}
}

// WindowEnd is the end of the window now: of a duration window the next
// multiple of its period, of a calendar one the next local midnight (day),
// and of a limiter without windows now itself.
func TestWindowEnd(t *testing.T) {
	now := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC).UnixNano()
	limit := int64(3)
	for _, c := range []struct {
		cfg  Config
		want int64
	}{
		{Config{Kind: "window", Limit: &limit, Period: "1m"}, time.Date(2031, 5, 6, 7, 9, 0, 0, time.UTC).UnixNano()},
		{Config{Kind: "window", Limit: &limit, Period: "day", Zone: "Europe/Berlin"}, time.Date(2031, 5, 6, 22, 0, 0, 0, time.UTC).UnixNano()},
		{Config{Rate: 5}, now},
	} {
		p, err := Compile(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.WindowEnd(now); got != c.want {
			t.Errorf("%+v: WindowEnd %v, want %v", c.cfg, time.Unix(0, got).UTC(), time.Unix(0, c.want).UTC())
		}
	}
}

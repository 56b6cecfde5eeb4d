package limiter

// The window engine: at most Limit permits per period, counted in windows.
//
// A duration period (a whole number of µs up to 366 days) cuts time into
// fixed windows aligned to the Unix epoch, as the reference Envoy rate limit
// server counts (its week, month and year are "168h", "720h" and "8760h").
// A calendar period ("day", "week", "month", "year") is a local day, ISO week,
// month or year in Zone (default UTC): see CalendarWindow.
//
// A sliding window (sliding: true, duration periods only) counts a request
// at t against the permits granted in the current fixed window plus those of
// the previous one, weighted by the part of the previous window still inside
// the period that ends at t:
//
//	used(t) = cur + ⌊prev · (P − e) / P⌋,  e = ⌊(t − start) / 1µs⌋, P = period in µs
//
// where start is the current window's start. The weight moves in whole
// microseconds, the resolution of the Redis clock, so that the model and the
// scripts compute the same integers (lua/window.lua); every product is exact
// (math/bits here, a double-and-add in Lua).
//
// A request for n permits is granted when used + n ≤ Limit, and only now: a
// window does not schedule permits into a later window, so max_wait does not
// change a decision (a blocking caller retries; see core.Service.Acquire).
// A denied request is told when the same request would be granted if nobody
// else asked (RetryAfter): the end of the window for a fixed or calendar
// window; for a sliding one, the first µs at which the previous window's
// weight has fallen far enough, in this window or the next. A request for
// more than Limit permits is out of range (CheckPermits), as for every kind,
// but for a Limit of 0: a deny-all rule, which refuses one permit until its
// window's end, and again in every window after.
//
// A charge (charge.go) may take the count past the limit. A sliding window
// carries at most Limit of an ended window's count into the next.
//
// The window fits the rate kinds' state: Next is the end of the current
// window (the instant its count resets, the limiter's position), Stored the
// permits granted in it, Rem those of the previous window (sliding only). A
// fresh state (Next = now) starts the window containing now at its first use.
// The limiter's "wait" (View.Wait, Result.Wait) is the number of permits left.
//
// Floors: a floor ahead of Next means the state lost grants of the window the
// caller was told about, so that window counts as full (windowFull).

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // calendar windows: every zone, whatever the host has
)

// Calendar is a calendar period of a window limiter (0: a duration period).
type Calendar int

// The calendar periods, by their code in the scripts (window.lua's calendar).
const (
	Day Calendar = iota + 1
	Week
	Month
	Year
)

var calendarNames = map[string]Calendar{"day": Day, "week": Week, "month": Month, "year": Year}

// Limits of a window limiter.
const (
	// MaxWindowLimit is the largest limit (permits per window), 2^32 − 1:
	// every count the Envoy protocol's requests_per_unit (a uint32) can
	// say. A limit of 0 refuses every request (a deny-all rule).
	MaxWindowLimit  = 1<<32 - 1
	MaxWindowPeriod = 366 * 24 * time.Hour // a duration period
	// MaxSlidingPeriod bounds a sliding window's period: its retry times
	// reach into the next window, and stay below 2^53 ns.
	MaxSlidingPeriod = 2400 * time.Hour
)

// windowParams are window's engine parameters (lua/window.lua's params).
var windowParams = []Param{
	{"limit", func(p *Params) float64 { return float64(p.Limit) }, func(p *Params, v float64) { p.Limit = int64(v) }},
	{"period", func(p *Params) float64 { return float64(p.Period) }, func(p *Params, v float64) { p.Period = int64(v) }},
	{"sliding", func(p *Params) float64 { return boolParam(p.Sliding) },
		func(p *Params, v float64) { p.Sliding = v == 1 }},
	{"calendar", func(p *Params) float64 { return float64(p.Calendar) },
		func(p *Params, v float64) { p.Calendar = Calendar(v) }},
	{"zone", func(p *Params) float64 { return float64(p.ZoneID) }, func(p *Params, v float64) { p.ZoneID = uint32(v) }},
}

// normalizeWindow checks a window limiter's fields and fills in the
// defaults: the period in canonical form ("1m0s", or the calendar name) and,
// for a calendar period, the zone (UTC).
func (c *Config) normalizeWindow() error {
	if c.Limit == nil {
		return fieldErr("limit", "is required for kind window: "+windowLimitRule, nil)
	}
	if v := *c.Limit; v < 0 || v > MaxWindowLimit {
		return fieldErr("limit", "must be "+windowLimitRule, v)
	}
	cal, period, err := parsePeriod(c.Period)
	if err != nil {
		return err
	}
	if cal == 0 {
		if c.Sliding && period > MaxSlidingPeriod {
			return fieldErr("sliding", "is for a period of at most 2400h (100 days): a denied request may wait into the next window", c.Period)
		}
		if c.Zone != "" {
			return fieldErr("zone", "is only for a calendar period (day, week, month or year)", c.Zone)
		}
		c.Period = period.String()
		return nil
	}
	c.Period = strings.ToLower(c.Period)
	if c.Sliding {
		return fieldErr("sliding", "is only for a duration period, not a calendar one ("+c.Period+")", true)
	}
	c.Zone = cmp.Or(c.Zone, "UTC")
	_, err = location(c.Zone)
	return err
}

// windowLimitRule is the rule a window's limit follows.
const windowLimitRule = "a whole number ≥ 0 and ≤ 4294967295 (2^32 − 1); 0 refuses every request"

// parsePeriod reads a window's period: a calendar name, or a duration that
// is a whole number of µs, at least 1µs and at most MaxWindowPeriod.
func parsePeriod(s string) (Calendar, time.Duration, error) {
	const rule = `is required: a duration that is a whole number of µs, ≥ 1µs and ≤ 8784h (366 days), or "day", "week", "month" or "year"`
	if cal, ok := calendarNames[strings.ToLower(s)]; ok {
		return cal, 0, nil
	}
	if s == "" {
		return 0, 0, fieldErr("period", rule, nil)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Microsecond || d > MaxWindowPeriod || d%time.Microsecond != 0 {
		return 0, 0, fieldErr("period", strings.TrimPrefix(rule, "is required: "), strconv.Quote(s))
	}
	return 0, d, nil
}

func compileWindow(c Config, p *Params) {
	// A limit of 0 still takes a request for one permit, which it refuses
	// (a deny-all rule answers when its window resets, not that the
	// request is out of range).
	p.Limit, p.MaxPermits, p.Sliding = *c.Limit, max(1, *c.Limit), c.Sliding
	cal, d, _ := parsePeriod(c.Period) // Normalize checked it
	p.Calendar, p.Period, p.Zone = cal, int64(d), c.Zone
	if c.Zone != "" {
		h := fnv.New32a()
		h.Write([]byte(c.Zone))
		p.ZoneID = h.Sum32()
	}
}

// locations caches time.LoadLocation, which reads the zone's data each time.
var locations sync.Map // zone name → *time.Location

// location loads an IANA zone; "Local" (the host's zone) is refused: a
// limiter shared by many hosts must not depend on one's settings.
func location(zone string) (*time.Location, error) {
	if l, ok := locations.Load(zone); ok {
		return l.(*time.Location), nil
	}
	l, err := time.LoadLocation(zone)
	if err != nil || zone == "Local" {
		return nil, fieldErr("zone", "must be an IANA time zone name such as \"UTC\" or \"Europe/Berlin\"", strconv.Quote(zone))
	}
	locations.Store(zone, l)
	return l, nil
}

// CalendarWindow returns the calendar window of period cal in zone that
// contains now (Unix ns): its start and end (Unix ns). A day starts at local
// midnight (or, in a zone whose clocks skip midnight, at the first instant of
// the local day), a week on Monday, a month on its 1st, a year on 1 January;
// a window ends where the next starts. The zone must be one Normalize
// accepted.
func CalendarWindow(cal Calendar, zone string, now int64) (start, end int64, err error) {
	loc, err := location(zone)
	if err != nil {
		return 0, 0, err
	}
	t := time.Unix(0, now).In(loc)
	y, m, d := t.Date()
	switch cal {
	case Day:
		return dayStart(y, m, d, loc), dayStart(y, m, d+1, loc), nil
	case Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		return dayStart(y, m, d-back, loc), dayStart(y, m, d-back+7, loc), nil
	case Month:
		return dayStart(y, m, 1, loc), dayStart(y, m+1, 1, loc), nil
	case Year:
		return dayStart(y, 1, 1, loc), dayStart(y+1, 1, 1, loc), nil
	}
	return 0, 0, fieldErr("period", "is not a calendar period", int(cal))
}

// dayStart is the first instant (Unix ns) of the local day y-m-d (normalized
// as time.Date does) in loc. Where midnight does not exist (a clock change at
// 00:00), time.Date may answer an instant of the day before; the day then
// starts at that zone's end, the change.
func dayStart(y int, m time.Month, d int, loc *time.Location) int64 {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	want := time.Date(y, m, d, 12, 0, 0, 0, time.UTC) // the normalized date
	if ty, tm, td := t.Date(); ty != want.Year() || tm != want.Month() || td != want.Day() {
		if _, end := t.ZoneBounds(); !end.IsZero() {
			t = end
		}
	}
	return t.UnixNano()
}

// WindowEnd returns the end (Unix ns) of the window of a window limiter
// that contains now: when a fresh window limiter's count would reset. A
// limiter without windows has none: now.
func (p *Params) WindowEnd(now int64) int64 {
	if p.Calendar == 0 && p.Period <= 0 {
		return now
	}
	_, end := p.windowAt(now)
	return end
}

// windowAt returns the window containing now: its start and end.
func (p *Params) windowAt(now int64) (start, end int64) {
	if p.Calendar != 0 {
		start, end, err := CalendarWindow(p.Calendar, p.Zone, now)
		if err != nil { // a zone Compile accepted loads: not reached
			return now, now + int64(time.Hour)
		}
		return start, end
	}
	off := now % p.Period
	if off < 0 {
		off += p.Period
	}
	return now - off, now - off + p.Period
}

// roll moves s to the window containing now once its window has ended: the
// count starts over, and a sliding window keeps the ended window's count as
// the previous one if it is the window just before. The time from the ended
// window's end to now, when no window was open, counts as idle.
//
// A calendar window's boundaries come from the store (see CalendarWindow and
// NeedsBounds): the state keeps the end of the current window (Next) and,
// when known, of the one after it (Pace > Next). roll moves into that one on
// its own; past it, only an acquire or a peek does (bounds: the store has
// sent the boundaries around now), not a reset or a reconfiguration.
func (p *Params) roll(s *State, now int64, bounds bool) {
	if now < s.Next {
		return
	}
	if p.Calendar != 0 {
		if now < s.Pace && s.Pace > s.Next { // the window after: known
			s.Idle += now - s.Next
			s.Rem, s.Stored, s.Next = 0, 0, s.Pace
			return
		}
		if bounds {
			_, end, after, err := CalendarBounds(p.Calendar, p.Zone, now)
			if err != nil { // a zone Compile accepted loads: not reached
				return
			}
			s.Idle += now - s.Next
			s.Rem, s.Stored, s.Next, s.Pace = 0, 0, end, after
		}
		return
	}
	start, end := p.windowAt(now)
	var prev int64
	if p.Sliding && start == s.Next {
		prev = min(s.Stored, p.Limit) // a floor's full window is Limit
	}
	s.Idle += now - s.Next
	s.Rem, s.Stored, s.Next = prev, 0, end
}

// NeedsBounds reports whether a call on a calendar window at now needs the
// store to send the window's boundaries first (lua/window.lua's bounds): its
// window has ended and the state does not know the next.
func (p *Params) NeedsBounds(s State, now int64) bool {
	s.Observe(now)
	return p.Calendar != 0 && s.Started && now >= s.Next && !(now < s.Pace && s.Pace > s.Next)
}

// CalendarBounds is what the store sends a calendar window whose window has
// ended (lua/bounds.lua): the start and end of the window containing now,
// and the end of the one after it, which the state keeps so that it moves
// into that window on its own; for a year, the end again (unknown: the end
// of the year after lies beyond what the scripts keep, 2^55 ns).
func CalendarBounds(cal Calendar, zone string, now int64) (start, end, after int64, err error) {
	start, end, err = CalendarWindow(cal, zone, now)
	if err != nil || cal == Year {
		return start, end, end, err
	}
	_, after, err = CalendarWindow(cal, zone, end)
	return start, end, after, err
}

// Bound is the store's bounds call (lua/bounds.lua) at now: the limiter
// starts, takes the floor f (if any), and a calendar window whose window has
// ended moves to the one containing now.
func (p *Params) Bound(s *State, now int64, f *Floor) {
	s.Observe(now)
	p.Start(s, now)
	if f != nil {
		p.ApplyFloor(s, now, *f)
	}
	p.roll(s, now, true)
}

// used is the count a request at now is measured against (see the top of
// this file), on a rolled state.
func (p *Params) used(s *State, now int64) int64 {
	if !p.Sliding || s.Rem == 0 {
		return s.Stored
	}
	pu := p.Period / 1000
	e := (now - (s.Next - p.Period)) / 1000
	return s.Stored + mulDiv(s.Rem, pu-e, pu)
}

// slideWait is how long after the start of a sliding window whose previous
// count is prev a request may use room permits of that weight (weight ≤
// room): 0 if at once, else the first whole µs e (in ns) at which
// ⌊prev · (P − e) / P⌋ ≤ room.
func (p *Params) slideWait(prev, room int64) int64 {
	if prev <= room {
		return 0
	}
	pu := p.Period / 1000
	// prev·(P − e) < (room + 1)·P  ⇔  P − e < ⌈(room + 1)·P / prev⌉
	return (pu - mulDivCeil(room+1, pu, prev) + 1) * 1000
}

// retryAfter is how long after now a denied request for n permits would be
// granted if nobody else asked; for more permits than the limit (a limit of
// 0), when the window resets.
func (p *Params) retryAfter(s *State, now, n int64) int64 {
	if !p.Sliding || n > p.Limit {
		return s.Next - now
	}
	if room := p.Limit - n - s.Stored; room >= 0 { // in this window
		return s.Next - p.Period + p.slideWait(s.Rem, room) - now
	}
	// in the next, where this window's count (at most a full window's, see
	// roll) is the previous one
	return s.Next + p.slideWait(min(s.Stored, p.Limit), p.Limit-n) - now
}

func (p *Params) acquireWindow(s *State, now, n, _ int64) Result {
	p.roll(s, now, true)
	if used := p.used(s, now); used+n > p.Limit {
		retry := p.retryAfter(s, now, n)
		return Result{Delay: retry, RetryAfter: retry, Wait: max(0, p.Limit-used)}
	}
	s.Stored += n
	s.Permits += n
	s.Last = now
	return Result{Granted: true, Permits: n, Scheduled: now, Start: now, Wait: p.Limit - p.used(s, now)}
}

var windowEngine = engine{
	acquire: (*Params).acquireWindow,
	charge:  (*Params).chargeWindow,
	// wait: the permits left; delay: until one permit would be granted
	peek: func(p *Params, s *State, now int64) (int64, int64) {
		p.roll(s, now, true)
		left := max(0, p.Limit-p.used(s, now))
		if left >= 1 {
			return left, 0
		}
		return left, p.retryAfter(s, now, 1)
	},
	// reset: the counts start over; the window stays where it is
	reset: func(p *Params, s *State, now int64) {
		p.roll(s, now, false)
		s.Stored, s.Rem = 0, 0
	},
	// A change keeps the current window and its count: a new period or
	// zone applies from the window that follows it (a floor a caller holds
	// stays the window's end); sliding off forgets the previous count.
	retune: func(s *State, now int64, old, new *Params) {
		old.roll(s, now, false)
		if !new.Sliding {
			s.Rem = 0
		}
		if old.Calendar != new.Calendar || old.ZoneID != new.ZoneID {
			s.Pace = s.Next // the window after is another one
		}
	},
	// the state lost grants of the window the floor saw: it is full
	floor:  func(s *State, _ int64) { s.Stored, s.Rem = windowFull, 0 },
	counts: true,
}

// windowFull is the count of a window a floor finds full: no limit is
// higher (lua/window.lua FULL).
const windowFull = MaxWindowLimit

// mulDiv is ⌊a·b/c⌋ for 0 ≤ a, b and c > 0 with a·b/c < 2^63.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

// mulDivCeil is ⌈a·b/c⌉ (mulDiv's conditions).
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	return int64(q)
}

// WindowConfig is the config of a window limiter of limit permits per
// period in fixed windows aligned to the Unix epoch (the Envoy reference
// server's rate_limit of limit requests per unit), normalized and checked
// as any config: its errors are *FieldError naming limit or period.
func WindowConfig(limit int64, period time.Duration) (Config, error) {
	c, _, err := Config{Kind: KindWindow, Limit: &limit, Period: shortDuration(period)}.Normalize()
	return c, err // Config{} with an error
}

// shortDuration writes a whole number of hours, minutes or seconds as people
// do ("24h", "1m", "1s"), anything else as time.Duration does.
func shortDuration(d time.Duration) string {
	for _, u := range []struct {
		unit   time.Duration
		suffix string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d > 0 && d%u.unit == 0 {
			return fmt.Sprintf("%d%s", d/u.unit, u.suffix)
		}
	}
	return d.String()
}

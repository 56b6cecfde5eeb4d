package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/limitd/limitd/wire"
)

// watchRow is one limiter's line of the watch table. A number the server
// has not sampled yet is NaN, shown as "-".
type watchRow struct {
	Name, Kind          string
	Granted, Refused    float64       // permits per second
	WouldRefuse         float64       // shadow mode: permits per second it would refuse
	Util                float64       // 0..1 and more
	Wait                time.Duration // how long a new caller would wait
	HasWait             bool
	Left, Limit         float64 // a window's remaining, a share's or concurrency limiter's free capacity
	HasLeft             bool
	Reset               time.Duration // a window's time to its end
	HasReset, Saturated bool
	Shadow              bool
}

// watchTable is what one screen of limitd ctl watch shows.
type watchTable struct {
	Server string
	At     time.Time // when it was drawn (the local clock: shown, never computed with)
	Redis  string    // "ok", "unavailable", or a problem's detail; "" unknown
	Lost   int64     // Unix ns of a Redis data loss, 0 none
	Rows   []watchRow
}

// formatWatch lays t out as a table: a header line, then a row per
// limiter in name order.
func formatWatch(t watchTable) string {
	var b strings.Builder
	fmt.Fprintf(&b, "limitd %s  %s", t.Server, t.At.Format("15:04:05"))
	if t.Redis != "" {
		fmt.Fprintf(&b, "  redis %s", t.Redis)
	}
	if t.Lost != 0 {
		fmt.Fprintf(&b, "  DATA LOST at %s", time.Unix(0, t.Lost).UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "  %d limiter(s)\n", len(t.Rows))
	cells := [][]string{{"NAME", "KIND", "GRANTED/S", "REFUSED/S", "UTIL", "WAIT", "LEFT", "RESET IN"}}
	rows := slices.Clone(t.Rows)
	slices.SortFunc(rows, func(a, b watchRow) int { return strings.Compare(a.Name, b.Name) })
	for _, r := range rows {
		kind := r.Kind
		if r.Shadow {
			kind += " (shadow)"
		}
		util := fmtPercent(r.Util)
		if r.Saturated {
			util += " !"
		}
		wait, left, reset := "", "", ""
		if r.HasWait {
			wait = fmtDuration(r.Wait)
		}
		if r.HasLeft {
			left = fmtAmount(r.Left) + "/" + fmtAmount(r.Limit)
		}
		if r.HasReset {
			reset = fmtDuration(r.Reset)
		}
		refused := fmtRate(r.Refused)
		if r.Shadow && r.WouldRefuse > 0 {
			refused = "would " + fmtRate(r.WouldRefuse) // nobody was refused
		}
		cells = append(cells, []string{r.Name, kind, fmtRate(r.Granted), refused, util, wait, left, reset})
	}
	b.WriteString(alignColumns(cells, 2))
	return b.String()
}

// alignColumns lays out rows of cells in columns two spaces apart, the
// first left columns flush left, the others flush right.
func alignColumns(rows [][]string, left int) string {
	var width []int
	for _, r := range rows {
		for i, c := range r {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		var line strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				line.WriteString("  ")
			}
			if i < left {
				line.WriteString(c + pad)
			} else {
				line.WriteString(pad + c)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// fmtDuration rounds d for reading: 250ms, 1.5s, 1m34s, 2h5m; 0 is "0".
func fmtDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		d = d.Round(time.Second)
	default:
		d = d.Round(time.Minute)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") { // "1m0s", "2h5m0s"
		s = strings.TrimSuffix(s, "0s")
	}
	return s
}

// fmtRate is a rate per second: "-" unknown, then 3 significant digits at
// most (0, 0.5, 12.5, 1234).
func fmtRate(r float64) string {
	switch {
	case math.IsNaN(r):
		return "-"
	case r == 0:
		return "0"
	case r < 10:
		return trimZeros(fmt.Sprintf("%.2f", r))
	case r < 100:
		return trimZeros(fmt.Sprintf("%.1f", r))
	}
	return fmt.Sprintf("%.0f", r)
}

func fmtPercent(u float64) string {
	if math.IsNaN(u) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", u*100)
}

// fmtAmount is a count or a share's capacity: whole numbers as integers.
func fmtAmount(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return trimZeros(fmt.Sprintf("%.2f", v))
}

func trimZeros(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// rowOf is the row of a state event: the server's signals as they are;
// without them yet, only the name and kind.
func rowOf(e wire.LimiterEvent) watchRow {
	n := watchRow{Name: e.Name, Kind: string(e.Config.Kind), Shadow: e.Config.Shadow,
		Granted: math.NaN(), Refused: math.NaN(), Util: math.NaN()}
	s := e.Signals
	if s == nil {
		return n
	}
	n.Granted, n.Refused, n.WouldRefuse, n.Util = s.GrantedPerS, s.RefusedPerS, s.ShadowRefusedPerS, s.Utilization
	if s.Span == 0 { // one read yet: no rate
		n.Granted, n.Refused = math.NaN(), math.NaN()
	}
	// A lease kind's callers do not wait for a permit: no wait is shown.
	n.Wait, n.HasWait = time.Duration(s.Wait), s.InUse == nil && s.Held == nil
	n.Saturated = s.Saturated && s.Health != "would_refuse"
	switch {
	case s.Remaining != nil && s.Limit != nil:
		n.Left, n.Limit, n.HasLeft = float64(*s.Remaining), float64(*s.Limit), true
	case s.Free != nil && s.Limit != nil:
		n.Left, n.Limit, n.HasLeft = float64(*s.Free), float64(*s.Limit), true
	case s.Held != nil && s.Capacity != nil:
		n.Left, n.Limit, n.HasLeft = *s.Capacity-*s.Held, *s.Capacity, true
	}
	if s.ResetAt != nil { // a lease's expiry is no reset: not shown here
		n.Reset, n.HasReset = time.Duration(*s.ResetAt-s.T), true
	}
	return n
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// clearScreen moves the cursor home and clears the screen (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// watch follows GET /v1/events and shows the limiters named (or every one)
// as a table, redrawn each tick when something changed: in place on a
// terminal. With once it prints the first table, when every limiter has
// been seen, and returns.
func (c *ctl) watch(ctx context.Context, names []string, once bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	expect, err := c.expected(ctx, names)
	if err != nil {
		return err
	}
	resp, err := c.openEvents(ctx, names)
	if err != nil || resp == nil {
		return err
	}
	defer resp.Body.Close()

	events := make(chan sseEvent)
	readErr := make(chan error, 1)
	go func() { readErr <- readSSE(ctx, resp.Body, events) }()
	defer func() { // cancel ends the request, and with it the reader
		cancel()
		resp.Body.Close()
		<-readErr
	}()

	v := &watchView{c: c, once: once, expect: expect, again: map[string]int{}, rows: map[string]watchRow{},
		t: watchTable{Server: c.base}, term: isTerminal(c.out)}
	v.changed = len(expect) == 0 // with no limiter, the first tick draws an empty table
	tick := time.NewTicker(c.tick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-readErr:
			readErr <- err // for the deferred wait
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				return fmt.Errorf("the event stream of %s ended: the server stopped", c.base)
			}
			return fmt.Errorf("the event stream of %s ended: %v", c.base, err)
		case <-tick.C:
			if v.tick() {
				return nil
			}
		case ev := <-events:
			if done, err := v.event(ev); done || err != nil {
				return err
			}
		}
	}
}

// expected is the set of limiters watch waits for.
func (c *ctl) expected(ctx context.Context, names []string) (map[string]bool, error) {
	expect := map[string]bool{}
	if len(names) == 0 {
		if err := c.eachLimiter(ctx, func(l wire.Limiter) { expect[l.Name] = true }); err != nil {
			return nil, err
		}
	}
	for _, n := range names {
		expect[n] = true
	}
	return expect, nil
}

// openEvents opens the event stream of the limiters named (every one when
// none is); nil and no error when ctx ended.
func (c *ctl) openEvents(ctx context.Context, names []string) (*http.Response, error) {
	path := "/v1/events"
	if len(names) > 0 {
		path += "?limiters=" + url.QueryEscape(strings.Join(names, ","))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Accept", "text/event-stream")
	hc := &http.Client{Transport: c.hc.Transport} // no timeout: the stream lasts
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot reach limitd at %s (%v): is it running? LIMITD_URL sets the address", c.base, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, c.call(ctx, http.MethodGet, path, c.token, nil, nil) // the same request, for its problem
	}
	return resp, nil
}

// watchView is watch's table as the events change it.
type watchView struct {
	c       *ctl
	once    bool
	expect  map[string]bool // limiters not seen yet
	again   map[string]int  // how often a limiter came again while others were awaited
	rows    map[string]watchRow
	t       watchTable
	term    bool
	changed bool
	drawn   int
}

func (v *watchView) draw() {
	v.t.At, v.t.Rows = time.Now(), slices.AppendSeq(v.t.Rows[:0], maps.Values(v.rows))
	s := formatWatch(v.t)
	if v.term {
		s = clearScreen + s
	} else if v.drawn > 0 {
		s = "\n" + s
	}
	fmt.Fprint(v.c.out, s)
	v.changed = false
	v.drawn++
}

// tick redraws a changed table; true: watch is done.
func (v *watchView) tick() bool {
	if v.once && len(v.expect) == 0 { // no limiter to wait for, no status either
		v.draw()
		return true
	}
	if v.changed && !v.once {
		v.draw()
		return v.c.ticks > 0 && v.drawn >= v.c.ticks
	}
	return false
}

// event applies one event to the table; done: once's table is drawn.
func (v *watchView) event(ev sseEvent) (done bool, err error) {
	switch ev.name {
	case "state":
		var e wire.LimiterEvent
		if err := json.Unmarshal(ev.data, &e); err != nil || e.Name == "" {
			return false, fmt.Errorf("the event stream sent a state event limitd ctl cannot read: %s", ev.data)
		}
		_, seen := v.rows[e.Name]
		v.rows[e.Name] = rowOf(e)
		v.changed = true
		if v.t.Redis == "" || strings.HasPrefix(v.t.Redis, "unavailable") {
			v.t.Redis = "ok"
		}
		delete(v.expect, e.Name)
		if seen {
			v.again[e.Name]++
		}
		// A limiter listed but not sampled (yet) must not hold once for
		// ever: after three rounds without it, the table is drawn.
		return v.drawOnce(len(v.expect) == 0 || v.again[e.Name] >= 3), nil
	case "config":
		var ch struct {
			Limiter string `json:"limiter"`
			Version int64  `json:"version"`
		}
		if json.Unmarshal(ev.data, &ch) == nil && ch.Limiter != "" && ch.Version == 0 {
			delete(v.rows, ch.Limiter)
			delete(v.expect, ch.Limiter)
			v.changed = true
			return v.drawOnce(len(v.expect) == 0), nil
		}
	case "status":
		var st wire.StreamStatus
		if json.Unmarshal(ev.data, &st) == nil && st.Redis != "" {
			v.t.Redis, v.t.Lost, v.changed = st.Redis, st.DataLost, true
		}
		return v.drawOnce(len(v.expect) == 0), nil // no limiter to wait for
	case "error":
		var p wire.Problem
		if json.Unmarshal(ev.data, &p) == nil {
			v.t.Redis, v.changed = "unavailable: "+p.Detail, true
		}
		return v.drawOnce(true), nil // this round will not come whole
	}
	return false, nil
}

// drawOnce draws the one table of once when ready is true; true: it did.
func (v *watchView) drawOnce(ready bool) bool {
	if !v.once || !ready {
		return false
	}
	v.draw()
	return true
}

// sseEvent is one Server-Sent Event: its name and data.
type sseEvent struct {
	name string
	data []byte
}

// readSSE sends every event of r on out until r ends (nil), fails, or ctx
// is done.
func readSSE(ctx context.Context, r io.Reader, out chan<- sseEvent) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.name != "" || ev.data != nil {
				select {
				case out <- ev:
				case <-ctx.Done():
					return nil
				}
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, ":"): // a comment: keep-alive
		case strings.HasPrefix(line, "event:"):
			ev.name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if ev.data != nil {
				ev.data = append(ev.data, '\n')
			}
			ev.data = append(ev.data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")...)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
}

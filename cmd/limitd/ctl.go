package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/httpjson"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

const ctlUsage = `usage: limitd ctl <verb> [arguments]

Administers the limiters of a running limitd server over its HTTP API.

Verbs:
  ls                     the limiters: name, kind, config, version
  get NAME               a limiter's config, version and live state (JSON)
  put NAME CONFIG        create or replace a limiter; CONFIG is a JSON config
                         ('{"rate":1000,"burst":1.1}') or a rate spec ('1000,1.1')
  patch NAME PATCH       change fields of a limiter's config, keeping its state:
                         a JSON merge patch ('{"rate":2000}')
  rm NAME                delete a limiter
  wait NAME              how far behind schedule it is, and how long a new caller
                         would wait (JSON)
  reset NAME             start a new schedule now: its backlog is forfeited
  watch [--once] [NAME...]
                         a table of the limiters (every limiter when none is
                         named), redrawn each second from the server's event
                         stream: permits granted and refused per second,
                         utilization, the wait of a new caller, what is left of
                         a window, share or concurrency limit and when a window
                         resets. Redrawn in place on a terminal, one table after
                         the other otherwise; --once prints one table. Ctrl-C
                         stops it.
  templates              the templates: id, pattern, order, live instances, config
  top TEMPLATE [--by refused|granted] [--limit N]
                         the template's instances that were refused (or granted)
                         the most permits over the last 5 minutes, across every
                         limitd on the Redis (N from 1 to 100, default 10)

NAME may also be a template's instance (get user:42): its template, TTL,
config and state.

Environment:
  LIMITD_URL             the server (default http://127.0.0.1:8080)
  LIMITD_ADMIN_TOKEN     sent with put, patch, rm and reset
  LIMITD_TOKEN           sent with the others (the admin token when this is unset)

Exit status: 0 done, 1 the server refused or could not be reached, 2 a mistake
on the command line.
`

func init() {
	register(&command{
		name:    "ctl",
		summary: "administer a running server's limiters: ls, get, put, patch, rm, wait, reset, watch, templates, top",
		usage:   ctlUsage,
		run: func(ctx context.Context, args []string, stdout, _ io.Writer) error {
			c, err := newCtl(environ(), stdout)
			if err != nil {
				return err
			}
			defer c.hc.CloseIdleConnections()
			return c.run(ctx, args)
		},
	})
}

// ctl is one run of limitd ctl.
type ctl struct {
	base              string // LIMITD_URL, without a trailing slash
	adminToken, token string
	hc                *http.Client
	out               io.Writer
	tick              time.Duration // watch's redraw interval
	ticks             int           // watch stops after this many tables (0: never)
}

const defaultCtlURL = "http://127.0.0.1:8080"

func newCtl(env map[string]string, out io.Writer) (*ctl, error) {
	base := cmp.Or(env["LIMITD_URL"], defaultCtlURL)
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErrorf("LIMITD_URL %q: want http://host:port or https://host:port", base)
	}
	return &ctl{base: strings.TrimRight(base, "/"), adminToken: env["LIMITD_ADMIN_TOKEN"],
		token: cmp.Or(env["LIMITD_TOKEN"], env["LIMITD_ADMIN_TOKEN"]),
		hc:    &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}},
		out:   out, tick: time.Second}, nil
}

// ctlVerbs are the verbs, how many arguments each takes (-1: any) and its
// flags.
var ctlVerbs = map[string]struct {
	args  int
	use   string
	flags []string
}{
	"ls": {0, "ls", nil}, "get": {1, "get NAME", nil}, "put": {2, "put NAME CONFIG", nil}, "patch": {2, "patch NAME PATCH", nil},
	"rm": {1, "rm NAME", nil}, "wait": {1, "wait NAME", nil}, "reset": {1, "reset NAME", nil},
	"watch": {-1, "watch [--once] [NAME...]", []string{"--once"}}, "templates": {0, "templates", nil},
	"top": {1, "top TEMPLATE [--by refused|granted] [--limit N]", []string{"--by", "--limit"}},
}

const ctlVerbList = "ls, get, put, patch, rm, wait, reset, watch, templates or top"

// ctlCommand is a checked command line of limitd ctl.
type ctlCommand struct {
	verb  string
	args  []string // names, then put's CONFIG or patch's PATCH
	body  []byte   // put's and patch's
	once  bool     // watch --once
	by    string   // top --by: refused (default) or granted
	limit int      // top --limit: 1..100, default 10
}

// checkCtl checks ctl's arguments before anything is sent.
func checkCtl(args []string) (ctlCommand, error) {
	if len(args) == 0 {
		return ctlCommand{}, usageErrorf("a verb is required: %s", ctlVerbList)
	}
	cmd := ctlCommand{verb: args[0], by: "refused", limit: 10}
	v, ok := ctlVerbs[cmd.verb]
	if !ok {
		return ctlCommand{}, usageErrorf("unknown verb %q: want %s", cmd.verb, ctlVerbList)
	}
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if !strings.HasPrefix(a, "-") || (cmd.verb == "put" || cmd.verb == "patch") {
			cmd.args = append(cmd.args, a)
			continue
		}
		flag, value, hasValue := strings.Cut(a, "=")
		if !slices.Contains(v.flags, flag) {
			return ctlCommand{}, usageErrorf("%s: unknown flag %s: limitd ctl %s", cmd.verb, flag, v.use)
		}
		if flag == "--once" {
			if hasValue {
				return ctlCommand{}, usageErrorf("%s: --once takes no value", cmd.verb)
			}
			cmd.once = true
			continue
		}
		if !hasValue {
			if i+1 == len(rest) {
				return ctlCommand{}, usageErrorf("%s: %s needs a value: limitd ctl %s", cmd.verb, flag, v.use)
			}
			i++
			value = rest[i]
		}
		switch flag {
		case "--by":
			if value != "refused" && value != "granted" {
				return ctlCommand{}, usageErrorf("%s: --by must be refused or granted (got %q)", cmd.verb, value)
			}
			cmd.by = value
		case "--limit":
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 || n > 100 {
				return ctlCommand{}, usageErrorf("%s: --limit must be a whole number from 1 to 100 (got %q)", cmd.verb, value)
			}
			cmd.limit = n
		}
	}
	if v.args >= 0 && len(cmd.args) != v.args {
		return ctlCommand{}, usageErrorf("%s takes %d argument(s): limitd ctl %s (got %d)", cmd.verb, v.args, v.use, len(cmd.args))
	}
	for i, name := range cmd.args {
		if (cmd.verb == "put" || cmd.verb == "patch") && i == 1 {
			break
		}
		if err := limitd.CheckName(name); err != nil {
			return ctlCommand{}, usageErrorf("%s: %v", cmd.verb, err)
		}
	}
	switch cmd.verb {
	case "put":
		body, err := ctlConfig(cmd.args[1])
		if err != nil {
			return ctlCommand{}, usageErrorf("put %s: %v", cmd.args[0], err)
		}
		cmd.body = body
	case "patch":
		var patch map[string]any
		if err := json.Unmarshal([]byte(cmd.args[1]), &patch); err != nil || patch == nil {
			return ctlCommand{}, usageErrorf(`patch %s: PATCH must be a JSON object of the fields to change, as '{"rate":2000}' (got %q)`, cmd.args[0], cmd.args[1])
		}
		cmd.body = []byte(cmd.args[1])
	}
	return cmd, nil
}

func (c *ctl) run(ctx context.Context, args []string) error {
	cmd, err := checkCtl(args)
	if err != nil {
		return err
	}
	rest, body := cmd.args, cmd.body
	switch cmd.verb {
	case "ls":
		return c.ls(ctx)
	case "get":
		return c.show(ctx, http.MethodGet, "/v1/limiters/"+rest[0], c.token, nil)
	case "put":
		return c.show(ctx, http.MethodPut, "/v1/limiters/"+rest[0], c.adminToken, body)
	case "patch":
		return c.show(ctx, http.MethodPatch, "/v1/limiters/"+rest[0], c.adminToken, body)
	case "rm":
		if err := c.call(ctx, http.MethodDelete, "/v1/limiters/"+rest[0], c.adminToken, nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "deleted %s\n", rest[0])
		return nil
	case "wait":
		return c.show(ctx, http.MethodGet, "/v1/limiters/"+rest[0]+"/wait", c.token, nil)
	case "reset":
		return c.show(ctx, http.MethodPost, "/v1/limiters/"+rest[0]+"/reset", c.adminToken, nil)
	case "templates":
		return c.templates(ctx)
	case "top":
		return c.top(ctx, rest[0], cmd.by, cmd.limit)
	default:
		return c.watch(ctx, rest, cmd.once)
	}
}

// ctlConfig is put's CONFIG as the body of PUT: a JSON config as it is, a
// rate spec as {"spec": ...}.
func ctlConfig(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "{") {
		if !json.Valid([]byte(s)) {
			return nil, fmt.Errorf("CONFIG is not valid JSON: %s", s)
		}
		return []byte(s), nil
	}
	if _, err := limiter.ParseSpec(s); err != nil {
		return nil, fmt.Errorf(`CONFIG is neither a JSON config ('{"rate":1000}') nor a rate spec ('1000,1.1'): %v`, err)
	}
	return json.Marshal(map[string]string{"spec": s})
}

// call makes one request of the API; an answer that is not 2xx, or no
// answer, is an error that says which and what to do.
func (c *ctl) call(ctx context.Context, method, path, token string, body []byte, out any) error {
	_, err := httpjson.Do(ctx, c.hc, method, c.base+path, token, body, out)
	var he *httpjson.Error
	var ne net.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &he) && he.Status == http.StatusUnauthorized:
		return fmt.Errorf("%s %s: %s (set LIMITD_ADMIN_TOKEN or LIMITD_TOKEN)", method, path, he.Detail)
	case errors.As(err, &he):
		return fmt.Errorf("%s %s: %s", method, path, he.Detail)
	case errors.Is(err, context.Canceled):
		return err
	case errors.As(err, &ne) || errors.Is(err, io.EOF):
		return fmt.Errorf("cannot reach limitd at %s (%v): is it running? LIMITD_URL sets the address", c.base, err)
	}
	return err
}

// show makes a request and prints its answer as indented JSON.
func (c *ctl) show(ctx context.Context, method, path, token string, body []byte) error {
	var v json.RawMessage
	if err := c.call(ctx, method, path, token, body, &v); err != nil {
		return err
	}
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // as the server wrote it
	return enc.Encode(v)
}

func (c *ctl) ls(ctx context.Context) error {
	rows := [][]string{{"NAME", "KIND", "CONFIG", "VERSION"}}
	err := c.eachLimiter(ctx, func(l wire.Limiter) {
		rows = append(rows, []string{l.Name, string(l.Config.Kind), configJSON(l.Config), strconv.FormatInt(l.Version, 10)})
	})
	if err != nil {
		return err
	}
	_, err = io.WriteString(c.out, alignColumns(rows, 4)) // every column flush left
	return err
}

// eachLimiter calls f with every limiter, in name order, a page at a time.
func (c *ctl) eachLimiter(ctx context.Context, f func(wire.Limiter)) error {
	cursor := ""
	for {
		var page wire.LimiterList
		if err := c.call(ctx, http.MethodGet, "/v1/limiters?limit=1000&cursor="+url.QueryEscape(cursor), c.token, nil, &page); err != nil {
			return err
		}
		for _, l := range page.Limiters {
			f(l)
		}
		if cursor = page.Next; cursor == "" {
			return nil
		}
	}
}

func (c *ctl) templates(ctx context.Context) error {
	var list wire.TemplateList
	if err := c.call(ctx, http.MethodGet, "/v1/templates?instances=true", c.token, nil, &list); err != nil {
		return err
	}
	fmt.Fprint(c.out, formatTemplates(list.Templates))
	return nil
}

// formatTemplates lays templates out as a table, in the order they match
// in; where one has a description (an Envoy rule's descriptors), a NAME
// column comes first: the description, else the id.
func formatTemplates(ts []wire.TemplateListed) string {
	named := slices.ContainsFunc(ts, func(t wire.TemplateListed) bool { return t.Description != "" })
	rows := [][]string{{"ID", "PATTERN", "ORDER", "INSTANCES", "KIND", "CONFIG", "VERSION"}}
	if named {
		rows[0] = append([]string{"NAME"}, rows[0]...)
	}
	for _, t := range ts {
		n := "-"
		if t.Instances != nil {
			n = strconv.FormatInt(*t.Instances, 10)
		}
		row := []string{t.ID, t.Pattern, strconv.Itoa(t.Order), n, string(t.Limiter.Kind), configJSON(t.Limiter),
			strconv.FormatInt(t.Version, 10)}
		if named {
			row = append([]string{cmp.Or(t.Description, t.ID)}, row...)
		}
		rows = append(rows, row)
	}
	return alignColumns(rows, len(rows[0])) // every column flush left
}

// configJSON is a config as JSON without its kind, shown beside it.
func configJSON(c limiter.Config) string {
	c.Kind = ""
	b, _ := json.Marshal(c)
	return string(b)
}

// ctlTop is the answer of GET /v1/templates/{id}/top.
type ctlTop struct {
	By        string `json:"by"`
	Since     int64  `json:"since_ns"`
	Instances []struct {
		Name    string  `json:"name"`
		Refused float64 `json:"refused"`
		Granted float64 `json:"granted"`
	} `json:"instances"`
}

func (c *ctl) top(ctx context.Context, template, by string, limit int) error {
	var t ctlTop
	path := fmt.Sprintf("/v1/templates/%s/top?by=%s&limit=%d", url.PathEscape(template), by, limit)
	if err := c.call(ctx, http.MethodGet, path, c.token, nil, &t); err != nil {
		return err
	}
	fmt.Fprint(c.out, formatTop(template, t))
	return nil
}

// formatTop lays a top answer out: what it counts, then a row per
// instance, busiest first.
func formatTop(template string, t ctlTop) string {
	var b strings.Builder
	fmt.Fprintf(&b, "template %s: instances by permits %s", template, t.By)
	if t.Since != 0 {
		fmt.Fprintf(&b, " since %s", time.Unix(0, t.Since).UTC().Format("15:04:05 UTC"))
	}
	b.WriteString("\n")
	if len(t.Instances) == 0 {
		b.WriteString("no instance took or was refused a permit\n")
		return b.String()
	}
	rows := [][]string{{"INSTANCE", "REFUSED", "GRANTED"}}
	for _, in := range t.Instances {
		rows = append(rows, []string{in.Name, fmtAmount(in.Refused), fmtAmount(in.Granted)})
	}
	b.WriteString(alignColumns(rows, 1))
	return b.String()
}

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

// trimZeros drops the trailing zeros of a number formatted with a point.
func trimZeros(s string) string {
	return strings.TrimRight(strings.TrimRight(s, "0"), ".")
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

// clearScreen moves the cursor home and clears the screen (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// watch follows GET /v1/events and shows the limiters named (or every one)
// as a table, redrawn each tick when something changed: in place on a
// terminal. With once it prints the first table, when every limiter has
// been seen, and returns.
func (c *ctl) watch(ctx context.Context, names []string, once bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	expect := map[string]bool{} // the limiters watch waits for
	for _, n := range names {
		expect[n] = true
	}
	if len(names) == 0 {
		if err := c.eachLimiter(ctx, func(l wire.Limiter) { expect[l.Name] = true }); err != nil {
			return err
		}
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
		t: watchTable{Server: c.base}}
	if f, ok := c.out.(*os.File); ok { // a terminal: redrawn in place
		fi, err := f.Stat()
		v.term = err == nil && fi.Mode()&os.ModeCharDevice != 0
	}
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

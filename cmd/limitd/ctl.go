package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/limitd/limitd/internal/httpjson"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
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
  watch [NAME...]        a line per second per limiter (every limiter when none is
                         named): permits granted per second, backlog, delay; for
                         share and concurrency limiters what their holders hold.
                         Ctrl-C stops it.

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
		summary: "administer a running server's limiters: ls, get, put, patch, rm, wait, reset, watch",
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
	tick              time.Duration // watch's interval
	ticks             int           // watch stops after this many lines per limiter (0: never)
}

const defaultCtlURL = "http://127.0.0.1:8080"

func newCtl(env map[string]string, out io.Writer) (*ctl, error) {
	base := env["LIMITD_URL"]
	if base == "" {
		base = defaultCtlURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErrorf("LIMITD_URL %q: want http://host:port or https://host:port", base)
	}
	c := &ctl{base: strings.TrimRight(base, "/"), adminToken: env["LIMITD_ADMIN_TOKEN"], token: env["LIMITD_TOKEN"],
		hc:  &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}},
		out: out, tick: time.Second}
	if c.token == "" {
		c.token = c.adminToken
	}
	return c, nil
}

// ctlVerbs are the verbs and how many names or values each takes after it
// (-1: any number).
var ctlVerbs = map[string]struct {
	args int
	use  string
}{
	"ls": {0, "ls"}, "get": {1, "get NAME"}, "put": {2, "put NAME CONFIG"}, "patch": {2, "patch NAME PATCH"},
	"rm": {1, "rm NAME"}, "wait": {1, "wait NAME"}, "reset": {1, "reset NAME"}, "watch": {-1, "watch [NAME...]"},
}

// checkCtl checks ctl's arguments before anything is sent: the verb, how
// many arguments it takes, the names, put's CONFIG and patch's PATCH. It
// returns the body of put or patch.
func checkCtl(args []string) (body []byte, err error) {
	if len(args) == 0 {
		return nil, usageErrorf("a verb is required: ls, get, put, patch, rm, wait, reset or watch")
	}
	verb, rest := args[0], args[1:]
	v, ok := ctlVerbs[verb]
	if !ok {
		return nil, usageErrorf("unknown verb %q: want ls, get, put, patch, rm, wait, reset or watch", verb)
	}
	if v.args >= 0 && len(rest) != v.args {
		return nil, usageErrorf("%s takes %d argument(s): limitd ctl %s (got %d)", verb, v.args, v.use, len(rest))
	}
	for i, name := range rest {
		if (verb == "put" || verb == "patch") && i == 1 {
			break
		}
		if err := store.CheckName(name); err != nil {
			return nil, usageErrorf("%s: %v", verb, err)
		}
	}
	switch verb {
	case "put":
		body, err := ctlConfig(rest[1])
		if err != nil {
			return nil, usageErrorf("put %s: %v", rest[0], err)
		}
		return body, nil
	case "patch":
		var patch map[string]any
		if err := json.Unmarshal([]byte(rest[1]), &patch); err != nil || patch == nil {
			return nil, usageErrorf(`patch %s: PATCH must be a JSON object of the fields to change, as '{"rate":2000}' (got %q)`, rest[0], rest[1])
		}
		return []byte(rest[1]), nil
	}
	return nil, nil
}

func (c *ctl) run(ctx context.Context, args []string) error {
	body, err := checkCtl(args)
	if err != nil {
		return err
	}
	verb, rest := args[0], args[1:]
	switch verb {
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
	default:
		return c.watch(ctx, rest)
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
	var b bytes.Buffer
	if err := json.Indent(&b, v, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := c.out.Write(b.Bytes())
	return err
}

// ls prints every limiter.
func (c *ctl) ls(ctx context.Context) error {
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tCONFIG\tVERSION")
	err := c.eachLimiter(ctx, func(l wire.Limiter) {
		cfg := l.Config
		kind := cfg.Kind
		cfg.Kind = ""
		b, _ := json.Marshal(cfg)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", l.Name, kind, b, l.Version)
	})
	if err != nil {
		return err
	}
	return tw.Flush()
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

// watch prints, every tick, a line per limiter: a rate limiter's permits
// granted per second since the last line (on the Redis clock), backlog and
// delay; a share limiter's holders and what they hold; a concurrency
// limiter's slots in use.
func (c *ctl) watch(ctx context.Context, names []string) error {
	all := len(names) == 0
	last := map[string]wire.WaitState{}
	for n := 0; c.ticks == 0 || n < c.ticks; n++ {
		if all {
			var err error
			if names, err = c.names(ctx); err != nil {
				return err
			}
		}
		for _, name := range names {
			line, err := c.watchLine(ctx, name, last)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "%s  %-24s %s\n", time.Now().Format("15:04:05"), name, line)
		}
		if c.ticks != 0 && n+1 == c.ticks {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.tick):
		}
	}
	return nil
}

// names lists every limiter's name.
func (c *ctl) names(ctx context.Context) ([]string, error) {
	var names []string
	err := c.eachLimiter(ctx, func(l wire.Limiter) { names = append(names, l.Name) })
	return names, err
}

// watchLine is one limiter's line (see watch); last keeps each rate
// limiter's previous state, for its rate.
func (c *ctl) watchLine(ctx context.Context, name string, last map[string]wire.WaitState) (string, error) {
	var l wire.Limiter
	if err := c.call(ctx, http.MethodGet, "/v1/limiters/"+name, c.token, nil, &l); err != nil {
		return "", err
	}
	switch {
	case l.State != nil:
		w := *l.State
		rate := "-"
		if p, ok := last[name]; ok && w.Now > p.Now && w.Version == p.Version {
			rate = fmt.Sprintf("%.1f/s", float64(w.Permits-p.Permits)/(float64(w.Now-p.Now)/1e9))
		}
		last[name] = w
		if v := w.Window; v != nil {
			return fmt.Sprintf("%-8s granted %-12s remaining %d of %d, resets in %v", l.Config.Kind, rate,
				v.Remaining, v.Limit, time.Duration(v.Reset)), nil
		}
		return fmt.Sprintf("%-8s granted %-12s backlog %-10v delay %-10v permits %d", l.Config.Kind, rate,
			time.Duration(w.Wait), time.Duration(w.Delay), w.Permits), nil
	case l.InUse != nil:
		return fmt.Sprintf("%-8s in use %d of %d", l.Config.Kind, *l.InUse, ptrOr(l.Config.Limit)), nil
	case l.Held != nil:
		learning := ""
		if l.Learning != nil && *l.Learning {
			learning = " (learning)"
		}
		return fmt.Sprintf("%-8s held %g of %g by %d holder(s)%s", l.Config.Kind, *l.Held, ptrOr(l.Config.Capacity),
			len(l.Holders), learning), nil
	}
	return string(l.Config.Kind), nil
}

func ptrOr[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

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
	var b bytes.Buffer
	if err := json.Indent(&b, v, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := c.out.Write(b.Bytes())
	return err
}

func (c *ctl) ls(ctx context.Context) error {
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tCONFIG\tVERSION")
	err := c.eachLimiter(ctx, func(l wire.Limiter) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", l.Name, l.Config.Kind, configJSON(l.Config), l.Version)
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

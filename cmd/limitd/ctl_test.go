package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// ctlRun runs limitd ctl args against base with env's tokens and returns
// what it printed and its error.
func ctlRun(t *testing.T, base string, env map[string]string, args ...string) (string, error) {
	t.Helper()
	e := map[string]string{"LIMITD_URL": base}
	for k, v := range env {
		e[k] = v
	}
	var out bytes.Buffer
	c, err := newCtl(e, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer c.hc.CloseIdleConnections()
	c.tick, c.ticks = 50*time.Millisecond, 2
	err = c.run(context.Background(), args)
	return out.String(), err
}

func mustCtl(t *testing.T, base string, env map[string]string, args ...string) string {
	t.Helper()
	out, err := ctlRun(t, base, env, args...)
	if err != nil {
		t.Fatalf("limitd ctl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// Every verb against a running server, with the admin token for changes.
func TestCtl(t *testing.T) {
	base, _, _ := startServe(t, map[string]string{"LIMITD_ADMIN_TOKEN": "adm"})
	admin := map[string]string{"LIMITD_ADMIN_TOKEN": "adm"}
	check := func(what, out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s printed %q, want it to contain %q", what, out, w)
			}
		}
	}
	check("put a spec", mustCtl(t, base, admin, "put", "orders", "1000,1.1"), `"name": "orders"`, `"rate": 1000`, `"burst": 1.1`)
	check("put JSON", mustCtl(t, base, admin, "put", "pool", `{"kind":"concurrency","limit":3}`), `"in_use": 0`)
	check("get", mustCtl(t, base, nil, "get", "orders"), `"version": 1`, `"state": {`)
	check("patch", mustCtl(t, base, admin, "patch", "orders", `{"rate":2000}`), `"rate": 2000`, `"version": 2`)
	check("wait", mustCtl(t, base, nil, "wait", "orders"), `"wait_ns"`, `"delay_ns"`)
	check("reset", mustCtl(t, base, admin, "reset", "orders"), `"idle_ns"`)
	ls := mustCtl(t, base, nil, "ls")
	check("ls", ls, "NAME", "KIND", "orders", "schedule", `{"rate":2000,"burst":1.1}`, "pool", "concurrency")
	if lines := strings.Count(ls, "\n"); lines != 3 {
		t.Errorf("ls printed %d lines, want a header and 2 limiters:\n%s", lines, ls)
	}
	w := mustCtl(t, base, nil, "watch", "--once")
	check("watch --once", w, "limitd "+base, "2 limiter(s)", "NAME", "GRANTED/S", "orders", "schedule", "pool", "concurrency", "3/3")
	if lines := strings.Count(w, "\n"); lines != 4 || strings.Contains(w, clearScreen) {
		t.Errorf("watch --once of 2 limiters printed %d lines (want a header, the column names and 2 rows, no screen clearing):\n%s", lines, w)
	}
	w = mustCtl(t, base, nil, "watch", "orders")
	if tables := strings.Count(w, "limitd "+base); tables != 2 || strings.Count(w, "orders") != 2 || strings.Contains(w, "pool") {
		t.Errorf("watch orders for 2 ticks printed %d tables, want 2 of orders alone:\n%s", tables, w)
	}
	putTemplate(t, base, "adm", "user", `{"pattern":"user:*","limiter":{"rate":5}}`)
	check("templates", mustCtl(t, base, nil, "templates"), "ID", "PATTERN", "INSTANCES", "user", "user:*", `{"rate":5,`)
	check("get an instance", mustCtl(t, base, nil, "get", "user:42"), `"name": "user:42"`, `"template": "user"`, `"rate": 5`, `"state": {`)
	if _, err := ctlRun(t, base, nil, "get", "nouser:42"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("get of a name matching no limiter and no template: %v", err)
	}
	check("rm", mustCtl(t, base, admin, "rm", "orders"), "deleted orders")
	if _, err := ctlRun(t, base, nil, "get", "orders"); err == nil || !strings.Contains(err.Error(), `limiter "orders": not found`) {
		t.Errorf("get of a deleted limiter: %v", err)
	}
	if _, err := ctlRun(t, base, nil, "put", "x", "10"); err == nil || !strings.Contains(err.Error(), "set LIMITD_ADMIN_TOKEN") {
		t.Errorf("put without the admin token: %v", err)
	}
	if _, err := ctlRun(t, base, admin, "put", "x", `{"rate":-1}`); err == nil || !strings.Contains(err.Error(), "rate") {
		t.Errorf("put of a bad config: %v", err)
	}
}

// putTemplate creates a template over the HTTP API (ctl has no verb for it).
func putTemplate(t *testing.T, base, token, id, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, base+"/v1/templates/"+id, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/templates/%s: %d", id, resp.StatusCode)
	}
}

// Mistakes on the command line exit 2 with the reason and a pointer to the
// help, before anything is sent; an unreachable server exits 1 and says
// where it looked.
func TestCtlErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"ctl"}, 2, "a verb is required"},
		{[]string{"ctl", "list"}, 2, `unknown verb "list"`},
		{[]string{"ctl", "get"}, 2, "get takes 1 argument(s): limitd ctl get NAME (got 0)"},
		{[]string{"ctl", "get", "bad name"}, 2, "get: "},
		{[]string{"ctl", "put", "x", "fast"}, 2, "CONFIG is neither a JSON config"},
		{[]string{"ctl", "put", "x", "{rate"}, 2, "CONFIG is not valid JSON"},
		{[]string{"ctl", "patch", "x", "[1]"}, 2, "PATCH must be a JSON object"},
		{[]string{"ctl", "get", "x"}, 1, "cannot reach limitd at http://127.0.0.1:1"},
		{[]string{"ctl", "top"}, 2, "top takes 1 argument(s): limitd ctl top TEMPLATE [--by refused|granted] [--limit N] (got 0)"},
		{[]string{"ctl", "top", "user", "--by", "late"}, 2, "--by must be refused or granted"},
		{[]string{"ctl", "top", "user", "--limit=0"}, 2, "--limit must be a whole number from 1 to 100"},
		{[]string{"ctl", "top", "user", "--limit"}, 2, "--limit needs a value"},
		{[]string{"ctl", "watch", "--fast"}, 2, "unknown flag --fast"},
		{[]string{"ctl", "ls", "--once"}, 2, "unknown flag --once"},
		{[]string{"ctl", "watch", "--once=yes"}, 2, "--once takes no value"},
	} {
		t.Setenv("LIMITD_URL", "http://127.0.0.1:1")
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("limitd %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.code, tc.want)
		}
		if tc.code == 2 && !strings.Contains(stderr.String(), "Run 'limitd help ctl' for usage.") {
			t.Errorf("limitd %s: no pointer to the help: %q", strings.Join(tc.args, " "), stderr.String())
		}
	}
	t.Setenv("LIMITD_URL", "ftp://x")
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"ctl", "ls"}, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), "LIMITD_URL") {
		t.Errorf("a bad LIMITD_URL: exit %d, %q", code, stderr.String())
	}
}

// templates counts a template's live instances; top names the instances
// refused (or granted) the most once the server's totals have reached
// Redis (each limitd adds them at least once a second); watch shows the
// server's signals.
func TestCtlTemplatesTopWatch(t *testing.T) {
	base, _, _ := startServe(t, map[string]string{})
	if w := mustCtl(t, base, nil, "watch", "--once"); !strings.Contains(w, "redis embedded  0 limiter(s)\nNAME") {
		t.Errorf("watch --once with no limiter printed:\n%s\nwant the header with the server's status, the column names", w)
	}
	putTemplate(t, base, "", "user", `{"pattern":"user:*","limiter":{"rate":1,"burst":1}}`)
	for i, n := range map[string]int{"user:42": 6, "user:7": 2} {
		for range n {
			acquire(t, base, i, `{"max_wait":"1ms"}`)
		}
	}
	if tpl := mustCtl(t, base, nil, "templates"); !strings.Contains(tpl, "user  user:*   0      2          schedule") {
		t.Errorf("templates with 2 live instances printed:\n%s", tpl)
	}
	// user:42 had 1 of 6 granted, user:7 1 of 2.
	want := "INSTANCE  REFUSED  GRANTED\nuser:42         5        1\nuser:7          1        1\n"
	var top string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if top = mustCtl(t, base, nil, "top", "user"); strings.HasSuffix(top, want) {
			break
		}
	}
	if !strings.HasSuffix(top, want) || !strings.HasPrefix(top, "template user: instances by permits refused since ") {
		t.Errorf("top user printed:\n%s\nwant it to end with:\n%s", top, want)
	}
	if top = mustCtl(t, base, nil, "top", "user", "--by", "granted", "--limit", "1"); strings.Count(top, "\nuser:") != 1 {
		t.Errorf("top user --by granted --limit 1 printed:\n%s", top)
	}
	if _, err := ctlRun(t, base, nil, "top", "nobody"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("top of an unknown template: %v", err)
	}
	if _, err := ctlRun(t, base, nil, "put", "orders", `{"rate":100}`); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		acquire(t, base, "orders", `{"permits":10}`)
	}
	// A limiter's rates are "-" until the server's sampler has read it
	// twice (a rate is a change over Redis time). Then its row has the
	// signals' utilization and rates.
	var row []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		w := mustCtl(t, base, nil, "watch", "--once")
		if !strings.Contains(w, "redis embedded  1 limiter(s)") {
			t.Fatalf("watch --once printed:\n%s", w)
		}
		_, r, _ := strings.Cut(w, "\norders ")
		if row = strings.Fields("orders " + r); len(row) >= 5 && strings.HasSuffix(row[4], "%") && row[2] != "-" {
			break
		}
	}
	if len(row) < 6 || row[1] != "schedule" || !strings.HasSuffix(row[4], "%") || row[2] == "-" || row[3] != "0" {
		t.Errorf("orders' row once sampled: %q; want its kind, granted/s, refused/s 0, a utilization, a wait", row)
	}
}

// acquire asks name for permits over the HTTP API, granted or not.
func acquire(t *testing.T, base, name, body string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/limiters/"+name+"/acquire", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("acquire %s: %d", name, resp.StatusCode)
	}
}

package main

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

const exampleBoot = `# the example of limitd help serve
limiters:
  orders: {rate: 1000, burst: 1.1, max_backlog: 10s}
  search: {spec: "200,1.5"}
  login: {kind: smooth, rate: 5, max_burst_seconds: 1}
templates:
  per-user: {pattern: "user:*", order: 10, idle_ttl: 10m, limiter: {rate: 50}}
`

func TestParseBootFile(t *testing.T) {
	b, err := parseBootFile("boot.yaml", []byte(exampleBoot))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range b.limiters {
		names = append(names, l.name)
	}
	if got := strings.Join(names, ","); got != "login,orders,search" {
		t.Errorf("limiters = %s, want login,orders,search (sorted)", got)
	}
	if len(b.templates) != 1 || b.templates[0].ID != "per-user" || b.templates[0].Pattern != "user:*" ||
		b.templates[0].Order != 10 || *b.templates[0].IdleTTL != limiter.Duration(10*time.Minute) {
		t.Errorf("templates = %+v", b.templates)
	}
	if b.limiters[1].config.MaxBacklog == nil || *b.limiters[1].config.MaxBacklog != limiter.Duration(10*time.Second) {
		t.Errorf("orders = %+v", b.limiters[1].config)
	}
}

func TestParseBootFileEmpty(t *testing.T) {
	for _, src := range []string{"", "# nothing yet\n", "limiters: {}\ntemplates:\n"} {
		b, err := parseBootFile("boot.yaml", []byte(src))
		if err != nil || len(b.limiters)+len(b.templates) != 0 {
			t.Errorf("%q: %+v, %v; want nothing and no error", src, b, err)
		}
	}
}

// Every error names the file, the line and the field, on one line.
func TestParseBootFileErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"unknown field", "limiters:\n  orders:\n    rate: 10\n    brust: 2\n",
			`boot.yaml: line 4: unknown field "brust"`},
		{"unknown top-level field", "limiter:\n  orders: {rate: 10}\n",
			`boot.yaml: line 1: unknown field "limiter"`},
		{"unknown template field", "templates:\n  t:\n    pattern: a*\n    limiter: {rate: 1, colour: red}\n",
			`boot.yaml: line 4: unknown field "colour"`},
		{"bad duration", "limiters:\n  orders: {rate: 10}\n  other:\n    rate: 10\n    max_backlog: 10x\n",
			`boot.yaml: line 5: limiters.other.max_backlog: must be a Go duration string like "250ms" (got "10x")`},
		{"bad burst", "limiters:\n  orders:\n    burst: lots\n",
			`boot.yaml: line 3: limiters.orders.burst: must be a number ≥ 1, or "inf" (got "lots")`},
		{"bad template duration", "templates:\n  t:\n    pattern: a*\n    limiter:\n      kind: smooth\n      rate: 1\n      warmup: soon\n",
			`boot.yaml: line 7: templates.t.limiter.warmup: must be a Go duration string`},
		{"bad idle_ttl", "templates:\n  t:\n    pattern: a*\n    idle_ttl: forever\n    limiter: {rate: 1}\n",
			`boot.yaml: line 4: templates.t.idle_ttl: must be a Go duration string`},
		{"wrong type", "limiters:\n  orders:\n    rate: fast\n",
			"boot.yaml: line 3: cannot unmarshal !!str `fast` into float64"},
		{"rate out of range", "limiters:\n  orders:\n    burst: 2\n    rate: 0\n",
			"boot.yaml: line 4: limiters.orders.rate: must be"},
		{"rate missing", "limiters:\n  orders:\n    burst: 2\n",
			"boot.yaml: line 2: limiters.orders.rate: must be"}, // no rate line: the entry's
		{"rate too high", "limiters:\n  orders:\n    burst: 2\n    rate: 1e12\n",
			"boot.yaml: line 4: limiters.orders.rate: must be"},
		{"burst below 1", "limiters:\n  orders:\n    rate: 5\n    burst: 0.5\n",
			`boot.yaml: line 4: limiters.orders.burst: must be a number ≥ 1, or "inf" (got "0.5")`},
		{"field of another kind", "limiters:\n  login: {kind: smooth, rate: 5, burst: 2}\n",
			"boot.yaml: line 2: limiters.login.burst: is not a setting of kind smooth"},
		{"bad kind", "limiters:\n  x:\n    kind: smoth\n    rate: 5\n",
			`boot.yaml: line 3: limiters.x.kind: must be schedule, smooth, window, share or concurrency (got "smoth")`},
		{"bad spec", "limiters:\n  x: {spec: \"fast,1.1\"}\n", "boot.yaml: line 2: limiters.x"},
		{"restart verb", "limiters:\n  x:\n    spec: \"100,1.1,restart\"\n",
			"boot.yaml: line 3: limiters.x.spec: must not use the restart verb"},
		{"bad name", "limiters:\n  orders: {rate: 1}\n  \"has space\": {rate: 1}\n",
			`boot.yaml: line 3: limiters: "has space" is not a valid name`},
		{"bad template id", "templates:\n  \"-x\": {pattern: a*, limiter: {rate: 1}}\n",
			`boot.yaml: line 2: templates: "-x" is not a valid id`},
		{"bad pattern", "templates:\n  t:\n    pattern: \"a b\"\n    limiter: {rate: 1}\n",
			"boot.yaml: line 3: templates.t.pattern: must be name characters"},
		{"template without limiter", "templates:\n  t: {pattern: \"a*\"}\n",
			"boot.yaml: line 2: templates.t.limiter.rate: must be"},
		{"template limiter rate", "templates:\n  t:\n    pattern: a*\n    limiter:\n      rate: -1\n",
			"boot.yaml: line 5: templates.t.limiter.rate: must be"},
		{"duplicate key", "limiters:\n  a: {rate: 1}\n  a: {rate: 2}\n",
			`boot.yaml: line 3: mapping key "a" already defined at line 2`},
		{"syntax", "limiters:\n  a: {rate: 1\n", "boot.yaml: line 1: did not find expected ',' or '}'"}, // yaml's own line
		{"not a mapping", "limiters: [a, b]\n", "boot.yaml: line 1: cannot unmarshal !!seq"},
		{"merge key", "limiters:\n  <<: {\"bad name\": {rate: 1}}\n", `boot.yaml: limiters: "bad name" is not a valid name`},
		{"two documents", "limiters: {}\n---\nlimiters: {}\n", "boot.yaml: holds more than one YAML document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseBootFile("boot.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			msg := oneLine(err.Error())
			if !strings.HasPrefix(msg, tc.want) {
				t.Errorf("error\n %s\nwant it to start with\n %s", msg, tc.want)
			}
			if strings.Contains(err.Error(), "\n") && !strings.Contains(tc.name, "syntax") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

// bootStore is a store over a fresh miniredis with the example boot file applied.
func bootStore(t *testing.T) (*miniredis.Miniredis, *store.Store, *bootFile) {
	t.Helper()
	mini := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	st := store.New(rdb, store.WithPrefix("boottest"))
	b, err := parseBootFile("boot.yaml", []byte(exampleBoot))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.apply(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	return mini, st, b
}

func TestBootApply(t *testing.T) {
	mini, st, b := bootStore(t)
	ctx := context.Background()
	info, err := st.Get(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Rate != 1000 || float64(*info.Config.Burst) != 1.1 {
		t.Errorf("orders = %+v", info.Config)
	}
	if _, err := st.Get(ctx, "login"); err != nil {
		t.Error(err)
	}
	if _, err := st.GetTemplate(ctx, "per-user"); err != nil {
		t.Error(err)
	}
	if got, _ := mini.Get("boottest:boot"); got != b.sum {
		t.Errorf("marker = %q, want the file's sum %q", got, b.sum)
	}

	// Applying again changes nothing: Put of an equal config keeps the version.
	if err := b.apply(ctx, st); err != nil {
		t.Fatal(err)
	}
	again, _ := st.Get(ctx, "orders")
	if again.Version != info.Version {
		t.Errorf("version moved from %d to %d on an identical boot", info.Version, again.Version)
	}
}

// syncBuffer is a log sink safe for the keeper's goroutine and the test's.
type syncBuffer struct {
	mu chan struct{}
	b  bytes.Buffer
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{mu: make(chan struct{}, 1)} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.b.String()
}

func TestBootKeeperReappliesAfterFlush(t *testing.T) {
	mini, st, b := bootStore(t)
	logs := newSyncBuffer()
	k := &bootKeeper{file: b, store: st, log: slog.New(slog.NewTextHandler(logs, nil)),
		interval: 5 * time.Millisecond, timeout: time.Second, applied: true}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	mini.FlushAll() // what a Redis restart without persistence leaves
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err1 := st.Get(context.Background(), "orders")
		_, err2 := st.GetTemplate(context.Background(), "per-user")
		if err1 == nil && err2 == nil && mini.Exists("boottest:boot") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("boot file not re-applied after FLUSHALL: %v, %v; log:\n%s", err1, err2, logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if !strings.Contains(logs.String(), "applied it again") {
		t.Errorf("the re-apply was not logged:\n%s", logs)
	}
}

// While Redis is down the keeper logs once, not once per check, and says when
// Redis is back.
func TestBootKeeperOutageLoggedOnce(t *testing.T) {
	mini, st, b := bootStore(t)
	logs := newSyncBuffer()
	k := &bootKeeper{file: b, store: st, log: slog.New(slog.NewTextHandler(logs, nil)),
		interval: time.Millisecond, timeout: 200 * time.Millisecond, applied: true}
	ctx := context.Background()

	mini.Close()
	for range 5 {
		k.check(ctx)
	}
	if n := strings.Count(logs.String(), `msg="redis unavailable`); n != 1 {
		t.Errorf("outage logged %d times, want once:\n%s", n, logs)
	}
	if err := mini.Restart(); err != nil {
		t.Fatal(err)
	}
	mini.FlushAll()
	k.check(ctx)
	if _, err := st.Get(ctx, "orders"); err != nil {
		t.Errorf("not re-applied once Redis was back: %v", err)
	}
	if !strings.Contains(logs.String(), "redis is back") || !strings.Contains(logs.String(), "applied it again") {
		t.Errorf("recovery not logged:\n%s", logs)
	}
	k.check(ctx) // nothing lost: nothing to do, nothing to log
	if n := strings.Count(logs.String(), "\n"); n != 3 {
		t.Errorf("%d log lines, want 3 (outage, re-applied, back):\n%s", n, logs)
	}
}

// A boot file is validated whole before anything is written.
func TestBootFileNothingHalfApplied(t *testing.T) {
	mini := miniredis.RunT(t)
	src := "limiters:\n  a: {rate: 10}\n  b: {rate: 10}\n  z: {rate: -1}\n"
	path := writeFile(t, "boot.yaml", src)
	err := serve(context.Background(), map[string]string{
		"LIMITD_ADDR": "127.0.0.1:0", "LIMITD_REDIS_URL": "redis://" + mini.Addr(), "LIMITD_CONFIG": path,
	}, newSyncBuffer(), nil)
	if err == nil || !strings.HasPrefix(err.Error(), "LIMITD_CONFIG: "+path+": line 4: limiters.z.rate:") {
		t.Fatalf("err = %v", err)
	}
	if keys := mini.Keys(); len(keys) != 0 {
		t.Errorf("a bad boot file wrote %v", keys)
	}
}

// A cluster shard restarted empty loses only its own limiters, and a lost
// index forgets names whose limiters are still there: the keeper checks every
// entry of the file and re-applies exactly what is missing, wherever the
// marker is.
func TestBootKeeperReappliesWhatOneShardLost(t *testing.T) {
	mini, st, b := bootStore(t)
	logs := newSyncBuffer()
	k := &bootKeeper{file: b, store: st, log: slog.New(slog.NewTextHandler(logs, nil)),
		interval: time.Millisecond, timeout: time.Second, applied: true}
	ctx := context.Background()
	search, err := st.Get(ctx, "search")
	if err != nil {
		t.Fatal(err)
	}

	mini.Del("boottest:{orders}:l") // orders' shard restarted
	mini.Del("boottest:{orders}:x")
	mini.ZRem("boottest:index", "login") // the index's shard restarted
	mini.HDel("boottest:templates", "per-user")
	if !mini.Exists("boottest:boot") {
		t.Fatal("the marker should still be there: this is the case it cannot see")
	}
	k.check(ctx)
	if _, err := st.Get(ctx, "orders"); err != nil {
		t.Errorf("orders not re-applied: %v", err)
	}
	if _, err := st.GetTemplate(ctx, "per-user"); err != nil {
		t.Errorf("per-user not re-applied: %v", err)
	}
	infos, _, err := st.List(ctx, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, i := range infos {
		listed = append(listed, i.Name)
	}
	for _, name := range []string{"orders", "login", "search"} {
		if !slices.Contains(listed, name) {
			t.Errorf("%s not listed after the keeper's check: %v", name, listed)
		}
	}
	if again, _ := st.Get(ctx, "search"); again.Version != search.Version {
		t.Errorf("search, which nothing lost, moved from version %d to %d", search.Version, again.Version)
	}
	if !strings.Contains(logs.String(), "applied it again") || !strings.Contains(logs.String(), "orders") {
		t.Errorf("the re-apply was not logged with what was lost:\n%s", logs)
	}
	n := strings.Count(logs.String(), "\n")
	k.check(ctx) // nothing lost now: nothing to do, nothing to log
	if m := strings.Count(logs.String(), "\n"); m != n {
		t.Errorf("a check with nothing lost logged:\n%s", logs)
	}
}

// shadow is a setting of every kind in the boot file too.
func TestParseBootFileShadow(t *testing.T) {
	b, err := parseBootFile("boot.yaml", []byte("limiters:\n  trial: {rate: 5, shadow: true}\n  login: {kind: smooth, rate: 5, shadow: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range b.limiters {
		if !l.config.Shadow {
			t.Errorf("%s: shadow not read: %+v", l.name, l.config)
		}
	}
}

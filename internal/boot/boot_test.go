package boot

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/testkit/logtest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// exampleBoot is the boot file of limitd help serve (cmd/limitd's serve
// tests start with it too).
var exampleBoot = func() string {
	b, err := os.ReadFile(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func TestParseBootFile(t *testing.T) {
	b, err := Parse("boot.yaml", []byte(exampleBoot))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range b.Limiters {
		names = append(names, l.Name)
	}
	if got := strings.Join(names, ","); got != "login,orders,search" {
		t.Errorf("limiters = %s, want login,orders,search (sorted)", got)
	}
	if len(b.Templates) != 1 || b.Templates[0].ID != "per-user" || b.Templates[0].Pattern != "user:*" ||
		b.Templates[0].Order != 10 || *b.Templates[0].IdleTTL != limiter.Duration(10*time.Minute) {
		t.Errorf("templates = %+v", b.Templates)
	}
	if b.Limiters[1].Config.MaxBacklog == nil || *b.Limiters[1].Config.MaxBacklog != limiter.Duration(10*time.Second) {
		t.Errorf("orders = %+v", b.Limiters[1].Config)
	}
}

func TestParseBootFileEmpty(t *testing.T) {
	for _, src := range []string{"", "# nothing yet\n", "limiters: {}\ntemplates:\n"} {
		b, err := Parse("boot.yaml", []byte(src))
		if err != nil || len(b.Limiters)+len(b.Templates) != 0 {
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
			_, err := Parse("boot.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			msg := err.Error()
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
func bootStore(t *testing.T) (*miniredis.Miniredis, *store.Store, *core.Service, *File) {
	t.Helper()
	mini := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	st := store.New(rdb, store.WithPrefix("boottest"))
	svc := core.New(st, core.Options{})
	b, err := Parse("boot.yaml", []byte(exampleBoot))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	return mini, st, svc, b
}

func TestBootApply(t *testing.T) {
	mini, st, svc, b := bootStore(t)
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
	if got, _ := mini.Get("boottest:boot"); got != b.Sum {
		t.Errorf("marker = %q, want the file's sum %q", got, b.Sum)
	}

	// Applying again changes nothing: Put of an equal config keeps the version.
	if err := b.Apply(ctx, svc); err != nil {
		t.Fatal(err)
	}
	again, _ := st.Get(ctx, "orders")
	if again.Version != info.Version {
		t.Errorf("version moved from %d to %d on an identical boot", info.Version, again.Version)
	}
}

func TestBootKeeperReappliesAfterFlush(t *testing.T) {
	mini, st, svc, b := bootStore(t)
	logs := &logtest.Buffer{}
	k := NewKeeper(b, svc, slog.New(slog.NewTextHandler(logs, nil)))
	k.Interval, k.Timeout, k.applied = 5*time.Millisecond, time.Second, true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.Run(ctx); close(done) }()
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
	mini, st, svc, b := bootStore(t)
	logs := &logtest.Buffer{}
	k := NewKeeper(b, svc, slog.New(slog.NewTextHandler(logs, nil)))
	k.Interval, k.Timeout, k.applied = time.Millisecond, 200*time.Millisecond, true
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
	if n := strings.Count(logs.String(), "\n"); n != 4 {
		t.Errorf("%d log lines, want 4 (outage, data lost, re-applied, back):\n%s", n, logs)
	}
}

// A cluster shard restarted empty loses only its own limiters, and a lost
// index forgets names whose limiters are still there: the keeper checks every
// entry of the file and re-applies exactly what is missing, wherever the
// marker is.
func TestBootKeeperReappliesWhatOneShardLost(t *testing.T) {
	mini, st, svc, b := bootStore(t)
	logs := &logtest.Buffer{}
	k := NewKeeper(b, svc, slog.New(slog.NewTextHandler(logs, nil)))
	k.Interval, k.Timeout, k.applied = time.Millisecond, time.Second, true
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
	b, err := Parse("boot.yaml", []byte("limiters:\n  trial: {rate: 5, shadow: true}\n  login: {kind: smooth, rate: 5, shadow: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range b.Limiters {
		if !l.Config.Shadow {
			t.Errorf("%s: shadow not read: %+v", l.Name, l.Config)
		}
	}
}

const grpcBoot = `
domains:
  - domain: api
    descriptors:
      - key: user
        limiter: {kind: schedule, rate: 1, burst: 1}
`

// A bad domains: section is refused at boot with its line.
func TestBootDomainsError(t *testing.T) {
	_, err := Parse("boot.yaml", []byte(`
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit:
          unit: fortnight
          requests_per_unit: 5
`))
	if err == nil || !strings.Contains(err.Error(), "boot.yaml: line 7: domains[0].descriptors[0].rate_limit.unit: must be one of second") {
		t.Errorf("%v", err)
	}
	_, err = Parse("boot.yaml", []byte("domains:\n  - domain: a\n    descriptors:\n      - {key: k, colour: red}\n"))
	if err == nil || !strings.Contains(err.Error(), `boot.yaml: line 4: unknown field "colour" (in domains[0].descriptors[0])`) {
		t.Errorf("unknown field: %v", err)
	}
}

// The keeper reloads a changed file on a signal: a valid one replaces the
// rules and is applied; a bad one is logged once and the old one kept.
func TestBootReload(t *testing.T) {
	_, _, svc, _ := bootStore(t)
	file := filepath.Join(t.TempDir(), "boot.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(grpcBoot)
	b, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	hup := make(chan os.Signal)
	got := make(chan *File, 1)
	k := NewKeeper(b, svc, slog.New(slog.NewTextHandler(logs, nil)))
	k.Interval, k.Timeout, k.Hup, k.Reloaded = time.Hour, time.Second, hup, func(nb *File) { got <- nb }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	write(grpcBoot + "      - key: path\n        limiter: {rate: 5}\n")
	hup <- os.Interrupt // any signal value: the keeper only hears that one came
	var nb *File
	select {
	case nb = <-got:
	case <-time.After(10 * time.Second):
		t.Fatalf("no reload:\n%s", logs)
	}
	if nb.Rules.Len() != 2 {
		t.Errorf("reloaded rules: %d, want 2", nb.Rules.Len())
	}
	tpls, err := svc.Templates(ctx)
	if err != nil || len(tpls) != 3 { // per-user from the example, and the two rules'
		t.Errorf("templates after reload: %d, %v; want 3", len(tpls), err)
	}

	write("domains:\n  - domain: ''\n")
	hup <- os.Interrupt
	hup <- os.Interrupt // the same bad content again: logged once
	cancel()
	<-done
	if n := strings.Count(logs.String(), "the boot file changed and is invalid"); n != 1 {
		t.Errorf("bad file logged %d times, want once:\n%s", n, logs)
	}
	if k.file != nb {
		t.Error("a bad file replaced the good one")
	}
	select {
	case <-got:
		t.Error("a bad file was handed on")
	default:
	}
}

// Anchors, aliases and merge keys are read as YAML reads them, and what a
// merge brings in is checked like the rest, with its own line.
func TestParseBootFileMerge(t *testing.T) {
	b, err := Parse("boot.yaml", []byte("limiters:\n  a: &base {rate: 10, burst: 2}\n  b:\n    <<: *base\n    rate: 20\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Limiters[1]; got.Name != "b" || got.Config.Rate != 20 || float64(*got.Config.Burst) != 2 {
		t.Errorf("b = %+v, want rate 20 (its own) and burst 2 (merged)", got)
	}
	for _, tc := range []struct{ src, want string }{
		{"limiters:\n  b:\n    rate: 1\n    <<: {burst: 2,\n      colour: red}\n", `boot.yaml: line 5: unknown field "colour" (in limiters.b)`},
		{"limiters:\n  a: &base {rate: fast}\n  b: *base\n", "boot.yaml: line 2: cannot unmarshal !!str `fast` into float64 (in limiters.a.rate)"},
		{"limiters:\n  b:\n    <<: 5\n", "boot.yaml: line 3: a merge key (<<) takes a mapping or a list of mappings (in limiters.b)"},
	} {
		if _, err := Parse("boot.yaml", []byte(tc.src)); err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
}

// Redis emptied (the marker gone): limitd is not ready from the moment Redis
// lost it, Ready itself looking for the marker, until the keeper applied the
// boot file again; the loss is logged once at ERROR and counted once.
func TestBootKeeperDataLoss(t *testing.T) {
	mini, st, svc, b := bootStore(t)
	logs := &logtest.Buffer{}
	k := NewKeeper(b, svc, slog.New(slog.NewTextHandler(logs, nil)))
	var told []int64
	k.OnDataLost = func(at int64) { told = append(told, at) }
	ctx := context.Background()
	k.Boot(ctx)
	if err := svc.Ready(ctx); err != nil {
		t.Fatalf("not ready after boot: %v", err)
	}
	lostAt := time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC)
	mini.SetTime(lostAt)
	mini.FlushAll()
	err := svc.Ready(ctx)
	if !errors.Is(err, core.ErrDataLost) || !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("Ready after FLUSHALL = %v, want ErrDataLost (unavailable)", err)
	}
	if at, pending, n := svc.DataLoss(); at != lostAt.UnixNano() || !pending || n != 1 {
		t.Errorf("DataLoss = %d, %v, %d; want %d (Redis time), pending, 1", at, pending, n, lostAt.UnixNano())
	}
	if _, err := st.Get(ctx, "orders"); err == nil {
		t.Fatal("orders still there after FLUSHALL")
	}
	k.check(ctx)
	if err := svc.Ready(ctx); err != nil {
		t.Errorf("not ready once the boot file was applied again: %v", err)
	}
	if _, err := st.Get(ctx, "orders"); err != nil {
		t.Errorf("orders not applied again: %v", err)
	}
	k.check(ctx) // nothing lost since: nothing logged, nothing counted
	if at, pending, n := svc.DataLoss(); at != lostAt.UnixNano() || pending || n != 1 {
		t.Errorf("DataLoss = %d, %v, %d; want the loss's time, not pending, 1", at, pending, n)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 || !strings.Contains(logs.String(), "redis lost limitd's data") {
		t.Errorf("%d ERROR lines, want 1 telling the loss:\n%s", n, logs)
	}
	if len(told) != 1 || told[0] != lostAt.UnixNano() {
		t.Errorf("OnDataLost told %v, want once, the loss's time", told)
	}
}

// Without a boot file the keeper writes the marker alone: a loss is still
// logged and counted, and limitd is ready again as soon as it is re-marked.
func TestBootKeeperDataLossWithoutFile(t *testing.T) {
	mini, _, svc, _ := bootStore(t)
	logs := &logtest.Buffer{}
	k := NewKeeper(nil, svc, slog.New(slog.NewTextHandler(logs, nil)))
	ctx := context.Background()
	mini.FlushAll() // bootStore's apply marked it: Boot marks it again, finding nothing
	k.Boot(ctx)
	if !mini.Exists("boottest:boot") {
		t.Fatal("Boot without a file wrote no marker")
	}
	mini.FlushAll()
	k.check(ctx)
	if !mini.Exists("boottest:boot") {
		t.Error("the marker was not written again")
	}
	if err := svc.Ready(ctx); err != nil {
		t.Errorf("not ready after re-marking: %v", err)
	}
	if _, pending, n := svc.DataLoss(); pending || n != 1 {
		t.Errorf("DataLoss pending %v, count %d; want not pending, 1", pending, n)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 || !strings.Contains(logs.String(), "no boot file") {
		t.Errorf("the loss was not logged at ERROR:\n%s", logs)
	}
}

// A loss a readiness probe finds first has the keeper apply the file again
// at once, not at its next check.
func TestBootKeeperWokenByProbe(t *testing.T) {
	mini, st, svc, b := bootStore(t)
	k := NewKeeper(b, svc, slog.New(slog.DiscardHandler))
	k.Interval = time.Hour // no check of its own during the test
	ctx, cancel := context.WithCancel(context.Background())
	k.Boot(ctx)
	done := make(chan struct{})
	go func() { k.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	mini.FlushAll()
	if err := svc.Ready(context.Background()); !errors.Is(err, core.ErrDataLost) {
		t.Fatalf("Ready after FLUSHALL = %v, want ErrDataLost", err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if _, err := st.Get(context.Background(), "orders"); err == nil && svc.Ready(context.Background()) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the keeper did not apply the boot file again after the probe found the loss")
		}
	}
}

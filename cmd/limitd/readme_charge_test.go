package main

// The Go example of charges (docs/http.md), run: see readme_test.go.

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// readmeComplete is the stub of the model call in the README's charges
// example, and what the run puts in its place: every answer uses 300 tokens.
const (
	readmeComplete = `func complete(prompt string) (string, int64) { /* the model call */ return "", 0 }`
	runComplete    = `func complete(prompt string) (string, int64) { return "an answer to " + prompt, 300 }`
)

// chargeHarness runs the README's answer and answerPaced over miniredis,
// whose clock stands still: a budget of 1,000 tokens a minute admits four
// answers of 300 of six, and three paced answers of 300 each reserve 4,096
// tokens and settle with 300. It panics unless the limiters counted exactly
// that.
const chargeHarness = `package main

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

func main() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	m.SetTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	st := store.New(rdb)
	limit := int64(1000)
	if _, err := st.PutTemplate(ctx, limitd.Template{ID: "tokens", Pattern: "tokens:*",
		Limiter: limiter.Config{Kind: limiter.KindWindow, Limit: &limit, Period: "1m"}}); err != nil {
		panic(err)
	}
	if _, _, err := st.Put(ctx, "llm-tokens-per-second", limiter.Config{Rate: 1e6}); err != nil {
		panic(err)
	}
	c := redisclient.New(rdb)
	defer c.Close()
	admitted := 0
	for range 6 {
		if _, err := answer(ctx, c, "ada", "hello"); err == nil {
			admitted++
		}
	}
	for range 3 {
		if _, err := answerPaced(ctx, c, "hello"); err != nil {
			panic(err)
		}
	}
	budget, err := st.Wait(ctx, "tokens:ada")
	if err != nil {
		panic(err)
	}
	paced, err := st.Wait(ctx, "llm-tokens-per-second")
	if err != nil {
		panic(err)
	}
	if admitted != 4 || budget.Permits != 1200 || paced.Permits != 900 {
		panic(fmt.Sprintf("admitted %d, budget %d tokens, paced %d tokens; want 4, 1200, 900", admitted, budget.Permits, paced.Permits))
	}
}
`

// TestREADMEChargeRuns runs the README's Go example of charges as written,
// but for the model call's stub, with a main of its own (chargeHarness).
func TestREADMEChargeRuns(t *testing.T) {
	t.Parallel() // each builds or serves on its own: a scratch folder, a free port
	if testing.Short() {
		// It links and runs a program of the client and a Redis: the
		// quick check leaves that out; TestREADMEGo compiles the block.
		t.Skip("builds and runs the example as a program: left out of -short")
	}
	blocks, _ := readREADME(t)
	i := slices.IndexFunc(blocks, func(b mdBlock) bool {
		return b.lang == "go" && b.section == readmeCharges && slices.Contains(b.lines, readmeComplete)
	})
	if i < 0 {
		t.Fatalf("no page has a go block under %q with the line %s", readmeCharges, readmeComplete)
	}
	src := strings.Replace(snippetFile(blocks[i]), "\nfunc main() {}\n", "\n", 1)
	src = strings.Replace(src, readmeComplete, runComplete, 1)
	root, dir := moduleScratch(t, "_readme-charge-")
	for name, text := range map[string]string{"example.go": src, "main.go": chargeHarness} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rel, _ := filepath.Rel(root, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := goCommand(ctx, t, root, "run", "./"+filepath.ToSlash(rel)).CombinedOutput(); err != nil {
		t.Fatalf("the charges example, run: %v\n%s", err, out)
	}
}

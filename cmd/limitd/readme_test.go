package main

// The examples of the README and of the pages under docs/ are tested here,
// so that none of them rots: every snippet must run as written, or say why
// it is not run.
//
//   - sh blocks whose first line is B=http://127.0.0.1:8080 are curl
//     examples, run as written: each curl command, with the block's
//     assignments before it, goes to sh against a limitd serve of this test
//     over miniredis (one serve per page, its blocks in page order); only
//     B=http://127.0.0.1:8080 is rewritten to the test's address. The Redis
//     clock is driven: it starts at a fixed instant and moves readmeStep per
//     command, and as far as a "sleep N" line says instead of sleeping, so
//     the answers do not depend on how fast the machine is. A command must
//     exit 0 and answer as the lines after it show: a status line
//     (HTTP/1.1 429 …) or a trailing "# 204" gives the status, else a
//     problem body's "status", else any 2xx; shown headers must be there; a
//     shown JSON body must have the keys shown, with the values shown,
//     except times and durations (keys ending in _ns, Retry-After), whose
//     type only is checked. "..." stands for more keys (an object without it
//     is shown whole, so a key the page does not show is an error), for any
//     value, or for more elements; "<cursor>" for any string.
//   - yaml blocks, and deploy/limitd.yaml, are boot files: boot.Parse
//     accepts them; an excerpt of deploy/envoy.yaml, an Istio EnvoyFilter
//     and an Envoy Gateway policy are checked as such.
//   - go blocks compile and pass go vet, each on its own; the Go client
//     example also runs, against a private redis-server
//     (TestREADMEGoClientRuns), as do the charges example
//     (TestREADMEChargeRuns) and every block with a main whose last lines
//     are an "// Output:" comment, whose output must be those lines
//     (TestDocsGoOutput). A block without a package clause is a file's
//     declarations: it gets "package main", the imports of the packages it
//     names, and an empty main when it has none.
//   - Other commands are not run. Each `go test` command, in a block or
//     inline, must name packages that exist and -run/-bench patterns of which
//     every alternative matches a test or benchmark there; `go run` must name
//     a main package, as must `go install`; `limitd bench` flags must parse, `limitd ctl` arguments
//     pass checkCtl. A command of any other
//     form is an error unless readmeNotRun lists it with a reason.
//   - A block of any other language (output, a tree) is preceded by the line
//     <!-- not run: REASON -->, which TestDocsSnippetsCovered requires.
//   - An inline `path` whose first element is in the repository must exist,
//     and a relative link must name a file that exists and a heading of it
//     (TestDocsLinks).
//
// Every problem is reported as FILE:LINE: what is wrong.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/boot"
)

const (
	readmeFile = "README.md"
	moduleRoot = "../.." // from cmd/limitd, where go test runs this test
	// readmeCharges is the section of charges, whose go block
	// TestREADMEChargeRuns runs.
	readmeCharges = "Charges: usage recorded after the fact"
	// docLineBase separates the pages' lines: a block's line is its page's
	// index in docFiles × docLineBase + its line in the page, so that one
	// number says where it is (docPos).
	docLineBase   = 1_000_000
	readmeBaseVar = "B=http://127.0.0.1:8080"
	// readmeStep is how far the Redis clock moves for each command of the
	// HTTP examples, about what a curl takes.
	readmeStep = 50 * time.Millisecond
	// readmeStatus is what curl writes after each answer (see curlrc).
	readmeStatus = "\n@@readme-status "
)

// curlBlock reports whether a block is curl examples that run (see the top
// of this file).
func curlBlock(b mdBlock) bool {
	return b.lang == "sh" && len(b.lines) > 0 && strings.HasPrefix(b.lines[0], readmeBaseVar)
}

// docFiles are the pages whose snippets are checked: the README, the
// CHANGELOG, then every page under docs/ in name order.
var docFiles = sync.OnceValue(func() []string {
	files := []string{readmeFile, "CHANGELOG.md"}
	pages, _ := filepath.Glob(filepath.Join(moduleRoot, "docs", "*.md"))
	for _, p := range pages {
		files = append(files, "docs/"+filepath.Base(p))
	}
	return files
})

// docPos is FILE:LINE of a block's line number (see docLineBase).
func docPos(line int) string {
	return fmt.Sprintf("%s:%d", docFiles()[line/docLineBase], line%docLineBase)
}

// docLine is the line number of FILE's line n, or -1 for a file not in
// docFiles.
func docLine(file string, n int) int {
	i := slices.Index(docFiles(), file)
	if i < 0 {
		return -1
	}
	return i*docLineBase + n
}

// readmeEpoch is the Redis time of the first HTTP example: the instant the
// first output of docs/http.md shows.
var readmeEpoch = time.Unix(0, 1795261877834527000)

// readmeNotRun are the pages' commands that are not run, and why. A
// command is listed by its words up to where they vary; its form is still
// checked (a go run names a main package, bench flags parse). go test
// commands are never run (suites and benchmarks are not this test's to run)
// and need no entry: their packages and patterns are checked.
var readmeNotRun = []struct{ cmd, why string }{
	{"go run ./cmd/limitd", "serves on the fixed 127.0.0.1:8080 until stopped; TestREADMEHTTP runs the same serve on a free port"},
	{"LIMITD_REDIS_URL=redis://127.0.0.1:6379 go run ./cmd/limitd", "needs the Redis at 127.0.0.1:6379, which is not the test's to use"},
	{"limitd bench --redis redis://127.0.0.1:6379", "needs the Redis at 127.0.0.1:6379; parseBench checks the flags"},
	{"scripts/bench-tables.sh", "runs every side-by-side benchmark for minutes; TestBenchTablesScript checks what it runs exists"},
	{"scripts/store-vs.sh", "runs for minutes; TestStoreVsScript runs it against HEAD, one short round per row"},
	{"scripts/envoy-vs.sh", "builds the reference rate limit server from the Go module proxy and runs for minutes; TestEnvoyVsScript runs it with QUICK=1 when LIMITD_ENVOY_VS=1"},
	{"limitd ctl", "talks to the server at LIMITD_URL; checkCtl checks the verb and its arguments, TestCtl runs every verb"},
	{"git worktree add", "checks out and builds another commit beside this one, for BenchmarkHTTPAcquireVs, whose form is checked"},
	{"mkdir -p /tmp/rl/config", "writes the rule file of the next line; TestRatelimitRuntimeDir serves such a directory"},
	{"RUNTIME_ROOT=/tmp/rl", "serves on the fixed ports 8080, 8081 and 6070 until stopped; TestRatelimitRuntimeDir runs limitd ratelimit over such a directory on free ports"},
	{"docker build", "needs a Docker engine; TestDockerfileImage reads the Dockerfile, TestDockerfileBuild runs its go build and the link"},
	{"kind load docker-image", "needs a kind cluster"},
	{"kubectl create secret", "needs a cluster"},
	{"helm install limitd deploy/helm/limitd", "needs a cluster; deploy/helm's TestLimitdChartDocsInstall renders the chart with these values"},
	{"helm upgrade --install eg", "needs a cluster and Envoy Gateway's chart; deploy/helm's TestEnvoyGatewayValues renders that chart with the values file"},
}

// readmeProblem is one wrong line of a page (see docLineBase).
type readmeProblem struct {
	line int
	msg  string
}

type readmeProblems []readmeProblem

func (ps *readmeProblems) add(line int, format string, a ...any) {
	*ps = append(*ps, readmeProblem{line, fmt.Sprintf(format, a...)})
}

// report fails t with every problem, in page order.
func (ps readmeProblems) report(t *testing.T) {
	t.Helper()
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].line < ps[j].line })
	for _, p := range ps {
		t.Errorf("%s: %s", docPos(p.line), p.msg)
	}
}

// mdBlock is a fenced code block.
type mdBlock struct {
	lang, section string
	line          int // the line of the block's first line (after the fence; see docLineBase)
	lines         []string
	// notRun is the reason of a <!-- not run: REASON --> line right before
	// the fence: the block is not checked.
	notRun string
}

// mdSpan is an inline code span outside the blocks.
type mdSpan struct {
	text, section string
	line          int
}

var (
	mdHeading = regexp.MustCompile("^##+ +(.*)$")
	mdSpanRE  = regexp.MustCompile("`([^`]+)`")
	mdNotRun  = regexp.MustCompile(`^<!-- not run: *(.*?) *-->$`)
)

// parseMarkdown finds the blocks and spans of a page; base is added to
// every line number (see docLineBase).
func parseMarkdown(text string) (blocks []mdBlock, spans []mdSpan) {
	return parsePage(text, 0)
}

func parsePage(text string, base int) (blocks []mdBlock, spans []mdSpan) {
	var (
		section string
		cur     *mdBlock
		prev    string
	)
	for i, l := range strings.Split(text, "\n") {
		n := base + i + 1
		before := prev
		prev = l
		if cur != nil {
			if strings.HasPrefix(l, "```") {
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			cur.lines = append(cur.lines, l)
			continue
		}
		if lang, ok := strings.CutPrefix(l, "```"); ok {
			cur = &mdBlock{lang: strings.TrimSpace(lang), section: section, line: n + 1}
			if m := mdNotRun.FindStringSubmatch(before); m != nil {
				cur.notRun = m[1]
				if cur.notRun == "" {
					cur.notRun = " " // marked, without a reason: TestDocsSnippetsCovered says so
				}
			}
			continue
		}
		if m := mdHeading.FindStringSubmatch(l); m != nil {
			section = strings.Trim(m[1], "` ")
		}
		for _, m := range mdSpanRE.FindAllStringSubmatch(l, -1) {
			spans = append(spans, mdSpan{text: m[1], section: section, line: n})
		}
	}
	return blocks, spans
}

// readREADME reads the README and the pages under docs/: their blocks that
// are not marked "not run", and their spans.
func readREADME(t *testing.T) ([]mdBlock, []mdSpan) {
	t.Helper()
	all, spans := readDocs(t)
	var blocks []mdBlock
	for _, b := range all {
		if b.notRun == "" {
			blocks = append(blocks, b)
		}
	}
	return blocks, spans
}

// readDocs reads every block and span of the README and the pages under
// docs/.
func readDocs(t *testing.T) (blocks []mdBlock, spans []mdSpan) {
	t.Helper()
	for i, f := range docFiles() {
		text, err := os.ReadFile(filepath.Join(moduleRoot, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		b, s := parsePage(string(text), i*docLineBase)
		blocks = append(blocks, b...)
		spans = append(spans, s...)
	}
	return blocks, spans
}

// ---- yaml -------------------------------------------------------------------

// TestREADMEYAML parses the README's yaml blocks and deploy/limitd.yaml as
// boot files.
func TestREADMEYAML(t *testing.T) {
	blocks, _ := readREADME(t)
	var ps readmeProblems
	n := 0
	for _, b := range blocks {
		if b.lang != "yaml" && b.lang != "yml" {
			continue
		}
		n++
		if len(b.lines) > 0 && strings.HasPrefix(b.lines[0], "# deploy/envoy.yaml") {
			if l, err := envoyExcerpt(b.lines[1:]); err != nil {
				ps.add(b.line+1+l, "%v", err)
			}
			continue
		}
		if len(b.lines) > 0 && strings.HasPrefix(b.lines[0], "# Envoy Gateway") {
			if err := gatewayPolicy(strings.Join(b.lines, "\n")); err != nil {
				ps.add(b.line, "not an Envoy Gateway BackendTrafficPolicy: %v", err)
			}
			continue
		}
		if len(b.lines) > 0 && strings.HasPrefix(b.lines[0], "# Istio") {
			if err := istioFilter(strings.Join(b.lines, "\n")); err != nil {
				ps.add(b.line, "not an Istio EnvoyFilter of the rate limit filter: %v", err)
			}
			continue
		}
		if _, err := boot.Parse(fmt.Sprintf("the block at line %d", b.line), []byte(strings.Join(b.lines, "\n"))); err != nil {
			line := b.line
			if m := regexp.MustCompile(`: line ([0-9]+): `).FindStringSubmatch(err.Error()); m != nil {
				k, _ := strconv.Atoi(m[1])
				line += k - 1
			}
			ps.add(line, "not a boot file: %v", err)
		}
	}
	if n == 0 {
		t.Error("no page has a yaml block")
	}
	ps.report(t)
	if _, err := boot.Load(filepath.Join(moduleRoot, "deploy", "limitd.yaml")); err != nil {
		t.Errorf("deploy/limitd.yaml: %v", err)
	}
}

// ---- the checks can fail ----------------------------------------------------

// Each check finds a page that is wrong, and names the line.
func TestREADMEChecksFail(t *testing.T) {
	wantLines := func(t *testing.T, ps readmeProblems, want map[int]string) {
		t.Helper()
		got := map[int]string{}
		for _, p := range ps {
			got[p.line] += p.msg + "; "
			t.Logf("found %s: %s", docPos(p.line), p.msg)
		}
		for line, sub := range want {
			if !strings.Contains(got[line], sub) {
				t.Errorf("line %d: want a problem with %q, got %q", line, sub, got[line])
			}
		}
		for line, msg := range got {
			if _, ok := want[line]; !ok {
				t.Errorf("line %d: unexpected problem %s", line, msg)
			}
		}
	}

	t.Run("http", func(t *testing.T) {
		blocks, _ := parseMarkdown("## Any section\n```sh\n" + // block at line 3
			readmeBaseVar + "; J='Content-Type: application/json'\n" +
			"curl -H \"$J\" -X PUT $B/v1/limiters/x -d '{\"rate\":5}'\n" +
			"{\"name\":\"x\",\"config\":{\"kind\":\"schedule\",\"rate\":6},\n" + // line 5: wrong value
			" \"versoin\":1,...}\n" + // line 6: wrong key
			"curl -H \"$J\" -X POST $B/v1/limiters/x/acquire -d '{}'\n" +
			"{\"granted\":true,\"permits\":1,\"delay_ns\":0}\n" + // line 8: keys left out without ...
			"curl -i -H \"$J\" -X POST $B/v1/limiters/x/acquire -d '{}'\n" +
			"HTTP/1.1 429 Too Many Requests\n" + // line 10: granted, 200
			"curl -X DELETE $B/v1/limiters/x      # 200\n" + // line 11: 204
			"curl $B/v1/limiters/nobody\n" + // line 12: 404, shown as a success
			"curl -X DELETE $B/v1/limiters/x\n" + // line 13: 404, no output shown
			"{\"status\":404,...}\n" +
			"redis-cli flushall\n" + // line 15: not a curl
			"curl http://127.0.0.1:8080/v1/limiters\n" + // line 16: not the test's address
			"curl -H \"$J\" -X PUT $B/v1/limiters/y \\\n" + // line 17: continued
			"     -d '{\"rate\":5}'\n" +
			"{\"name\":\"y\",...}\n" +
			"```\n")
		var ps readmeProblems
		checkHTTPExamples(t, blocks, &ps)
		wantLines(t, ps, map[int]string{
			5:  `config.rate: shows 6`,
			6:  `shows key "versoin"`,
			8:  `has keys lateness_ns, now_ns`,
			10: `shows status 429; the answer to README.md:9 was 200`,
			11: `shows status 200; the answer to README.md:11 was 204`,
			12: `shows no error; the answer was 404`,
			15: `"redis-cli flushall" is neither`,
			16: "not run: a command must reach limitd as $B",
		})
	})

	t.Run("go", func(t *testing.T) {
		blocks, _ := parseMarkdown("```go\nfunc run() error {\n\tx := 1\n\treturn nil\n}\n```\n\n```go\nif err != nil { ... }\n```\n" +
			"```go\nfunc f()  {}\n```\n") // line 12: not gofmt'd
		var ps readmeProblems
		checkGoBlocks(t, blocks, &ps)
		wantLines(t, ps, map[int]string{3: "declared and not used: x", 9: "expected declaration, found 'if'", 12: "not gofmt'd"})
	})

	t.Run("commands", func(t *testing.T) {
		blocks, spans := parseMarkdown("```sh\n" +
			"go test -run 'TestParseBootFile|TestNoSuchThing' ./internal/boot/\n" + // line 2
			"go test -run='^$' -bench=BenchmarkNoSuch -benchtime=1s ./store/\n" + // line 3
			"go test -run Diff ./nosuch/\n" + // line 4
			"limitd bench --redis redis://127.0.0.1:6379 --limiter demo --mode turbo\n" + // line 5
			"docker run limitd\n" + // line 6
			"go test -run TestParseBootFile/some_case -bench BenchmarkAcquire ./internal/boot/ ./store/\n" + // fine
			"```\n" +
			"See `go test -run Sim -v ./limiter/` and `limiter/no_such_test.go`, `application/json`.\n" + // line 9
			"```sh\n" +
			"CALLERS=16 LIMITD_ENV='GOGC=200' scripts/envoy-vs.sh\n" + // fine: the script reads both
			"CALLERZ=16 scripts/envoy-vs.sh\n" + // line 12
			"```\n")
		var ps readmeProblems
		checkCommands(moduleRoot, blocks, spans, &ps)
		wantLines(t, ps, map[int]string{
			2:  `"TestNoSuchThing" matches no test in ./internal/boot/`,
			3:  `"BenchmarkNoSuch" matches no benchmark`,
			4:  "go test ./nosuch/: no such package",
			5:  "--mode must be pool, direct or http",
			6:  `"docker run limitd" is neither run nor checked`,
			9:  "`limiter/no_such_test.go`: no such file",
			12: "scripts/envoy-vs.sh reads no CALLERZ",
		})
	})
}

package main

// The go blocks of the README and docs/, and the commands they do not run:
// see readme_test.go.

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/store"
)

// ---- sh: commands -----------------------------------------------------------

// shCommand is one command of an sh block: continuation lines joined, a
// trailing comment cut off.
type shCommand struct {
	line int
	text string
}

// splitComment cuts a shell line at its comment: a # outside quotes, at the
// start of a word.
func splitComment(s string) (code, comment string) {
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q == '\'':
			if c == '\'' {
				q = 0
			}
		case q == '"':
			if c == '\\' {
				i++
			} else if c == '"' {
				q = 0
			}
		case c == '\\':
			i++
		case c == '\'' || c == '"':
			q = c
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return strings.TrimRight(s[:i], " \t"), strings.TrimSpace(s[i+1:])
		}
	}
	return strings.TrimRight(s, " \t"), ""
}

// shWords splits a command into words as sh would, without expansions.
func shWords(s string) ([]string, error) {
	var (
		words []string
		w     strings.Builder
		in    bool // inside a word
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case ' ', '\t', '\n':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated '")
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			in = true
		case '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, errors.New(`unterminated "`)
			}
			in = true
		case '\\':
			if i+1 < len(s) {
				i++
				w.WriteByte(s[i])
			}
			in = true
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words, nil
}

// ---- go ---------------------------------------------------------------------

// snippetImports are the packages a go block without imports may name.
var snippetImports = map[string]string{
	"context":     "context",
	"errors":      "errors",
	"fmt":         "fmt",
	"http":        "net/http",
	"log":         "log",
	"os":          "os",
	"slog":        "log/slog",
	"time":        "time",
	"limitd":      "github.com/limitd/limitd",
	"client":      "github.com/limitd/limitd/client",
	"redisclient": "github.com/limitd/limitd/client/redisclient",
	"httplimit":   "github.com/limitd/limitd/httplimit",
	"limiter":     "github.com/limitd/limitd/limiter",
	"store":       "github.com/limitd/limitd/store",
	"redis":       "github.com/redis/go-redis/v9",
	"echo":        "github.com/labstack/echo/v4",
}

var (
	goPackageClause = regexp.MustCompile(`(?m)^package [A-Za-z_]`)
	goMainFunc      = regexp.MustCompile(`(?m)^func main\(\)`)
)

// snippetFile makes a go block a file. Its lines keep their page's numbers
// (a //line directive), so the compiler names the page's lines.
func snippetFile(b mdBlock) string {
	src := strings.Join(b.lines, "\n") + "\n"
	directive := fmt.Sprintf("//line %s\n", docPos(b.line))
	if goPackageClause.MatchString(src) {
		return directive + src
	}
	used := map[string]bool{}
	var s scanner.Scanner
	fset := token.NewFileSet()
	s.Init(fset.AddFile("", -1, len(src)), []byte(src), nil, 0)
	prev := ""
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.PERIOD && snippetImports[prev] != "" {
			used[prev] = true
		}
		prev = ""
		if tok == token.IDENT {
			prev = lit
		}
	}
	var f strings.Builder
	f.WriteString("package main\n\nimport (\n")
	for _, name := range slices.Sorted(maps.Keys(used)) {
		fmt.Fprintf(&f, "\t%q\n", snippetImports[name])
	}
	f.WriteString(")\n\n" + directive + src)
	if !goMainFunc.MatchString(src) {
		f.WriteString("\nfunc main() {}\n")
	}
	return f.String()
}

// checkGofmt reports the first line of a go block that gofmt would change.
func checkGofmt(b mdBlock, ps *readmeProblems) {
	src := strings.Join(b.lines, "\n") + "\n"
	prefix := ""
	if !goPackageClause.MatchString(src) {
		prefix = "package main\n\n"
	}
	out, err := format.Source([]byte(prefix + src))
	if err != nil {
		return // go vet names the line
	}
	got := strings.Split(strings.TrimPrefix(string(out), prefix), "\n")
	for i, l := range b.lines {
		if i >= len(got) || got[i] != l {
			want := ""
			if i < len(got) {
				want = got[i]
			}
			ps.add(b.line+i, "go block: not gofmt'd; gofmt makes the line %q", want)
			return
		}
	}
}

var vetLine = regexp.MustCompile(`((?:docs/)?[A-Za-z0-9_.-]+\.md):([0-9]+)(?::[0-9]+)?: (.*)`)

// checkGoBlocks compiles and vets every go block, each as its own main
// package in a directory of the module (so that it resolves the module's
// packages; a leading _ keeps ./... from seeing it), removed after.
func checkGoBlocks(t *testing.T, blocks []mdBlock, ps *readmeProblems) (n int) {
	t.Helper()
	var goBlocks []mdBlock
	for _, b := range blocks {
		if b.lang == "go" {
			goBlocks = append(goBlocks, b)
		}
	}
	if len(goBlocks) == 0 {
		return 0
	}
	root, dir := moduleScratch(t, "_readme-go-")
	args := []string{"vet"}
	for _, b := range goBlocks {
		checkGofmt(b, ps)
		sub := filepath.Join(dir, fmt.Sprintf("line%d", b.line)) // unique across pages
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, "main.go"), []byte(snippetFile(b)), 0o644); err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, sub)
		args = append(args, "./"+filepath.ToSlash(rel))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := goCommand(ctx, t, root, args...).CombinedOutput()
	if err == nil {
		return len(goBlocks)
	}
	found := false
	for _, l := range strings.Split(string(out), "\n") {
		if m := vetLine.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[2])
			if line := docLine(m[1], n); line >= 0 {
				ps.add(line, "go block: %s", m[3])
				found = true
			}
		}
	}
	if !found {
		ps.add(goBlocks[0].line, "go vet of the go blocks failed: %v\n%s", err, out)
	}
	return len(goBlocks)
}

// moduleScratch makes a directory in the module (so that a main package
// there resolves the module's packages; a leading _ keeps ./... from seeing
// it), removed when t ends, and returns the module's root and it.
func moduleScratch(t *testing.T, prefix string) (root, dir string) {
	t.Helper()
	root, err := filepath.Abs(moduleRoot)
	if err != nil {
		t.Fatal(err)
	}
	dir, err = os.MkdirTemp(root, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return root, dir
}

// goCommand is the go command in root with nothing to download: the README's
// blocks may use only what the module has.
func goCommand(ctx context.Context, t *testing.T, root string, args ...string) *exec.Cmd {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the README's go blocks need the go command: %v", err)
	}
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly", "GOWORK=off", "GOTOOLCHAIN=local")
	return cmd
}

// TestREADMEGo compiles and vets the go blocks of the README and docs/.
func TestREADMEGo(t *testing.T) {
	t.Parallel() // each builds or serves on its own: a scratch folder, a free port
	blocks, _ := readREADME(t)
	var ps readmeProblems
	if checkGoBlocks(t, blocks, &ps) == 0 {
		t.Error("no page has a go block")
	}
	ps.report(t)
}

// ---- commands that are not run ----------------------------------------------

func notRun(cmd string) bool {
	for _, n := range readmeNotRun {
		if cmd == n.cmd || strings.HasPrefix(cmd, n.cmd+" ") {
			return true
		}
	}
	return false
}

// shCommands are the commands of a block, comments and blank lines left out.
func shCommands(b mdBlock) []shCommand {
	var cmds []shCommand
	for i := 0; i < len(b.lines); i++ {
		code, _ := splitComment(b.lines[i])
		c := shCommand{line: b.line + i, text: strings.TrimSpace(code)}
		for strings.HasSuffix(c.text, "\\") && i+1 < len(b.lines) {
			i++
			code, _ = splitComment(b.lines[i])
			c.text = strings.TrimSpace(strings.TrimSuffix(c.text, "\\")) + " " + strings.TrimSpace(code)
		}
		if c.text != "" {
			cmds = append(cmds, c)
		}
	}
	return cmds
}

// checkCommand checks a command that is not run: its form, and that what it
// names exists.
func checkCommand(root string, c shCommand, ps *readmeProblems) {
	words, err := shWords(c.text)
	if err != nil {
		ps.add(c.line, "%q: %v", c.text, err)
		return
	}
	var vars []string // VAR=value before the command
	for len(words) > 0 && shAssign.MatchString(words[0]) {
		vars = append(vars, words[0][:strings.IndexByte(words[0], '=')])
		words = words[1:]
	}
	switch {
	case len(vars) > 0 && len(words) == 1 && strings.HasPrefix(words[0], "scripts/") && notRun(words[0]):
		// a script that is not run, with settings: it must read each
		script, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(words[0])))
		if err != nil {
			ps.add(c.line, "%q: %v", c.text, err)
			return
		}
		for _, v := range vars {
			if !strings.Contains(string(script), "${"+v) && !strings.Contains(string(script), "$"+v) {
				ps.add(c.line, "%q: %s reads no %s", c.text, words[0], v)
			}
		}
		return
	case len(words) >= 2 && words[0] == "go" && words[1] == "test":
		checkGoTest(root, c.line, words[2:], ps)
		return
	case len(words) == 3 && words[0] == "go" && words[1] == "install":
		// installs a binary: not run, but it must name a main package
		if !isMainPackage(filepath.Join(root, words[2])) {
			ps.add(c.line, "go install %s: no main package there", words[2])
		}
		return
	case !notRun(c.text):
		ps.add(c.line, "%q is neither run nor checked: make it a checked form or list it in readmeNotRun with the reason", c.text)
		return
	case len(words) >= 2 && words[0] == "go" && words[1] == "run":
		pkgs := slices.DeleteFunc(slices.Clone(words[2:]), func(w string) bool { return strings.HasPrefix(w, "-") })
		if len(pkgs) == 0 {
			ps.add(c.line, "%q names no package", c.text)
			return
		}
		if !isMainPackage(filepath.Join(root, pkgs[0])) {
			ps.add(c.line, "go run %s: no main package there", pkgs[0])
		}
	case len(words) >= 2 && words[0] == "limitd" && words[1] == "bench":
		if _, err := parseBench(words[2:]); err != nil {
			ps.add(c.line, "limitd bench: %v", err)
		}
	case len(words) >= 2 && words[0] == "limitd" && words[1] == "ctl":
		if _, err := checkCtl(words[2:]); err != nil {
			ps.add(c.line, "limitd ctl: %v", err)
		}
	}
}

func isMainPackage(dir string) bool {
	pkgs, err := goFiles(dir, false)
	if err != nil {
		return false
	}
	for _, f := range pkgs {
		if f.Name.Name == "main" {
			return true
		}
	}
	return false
}

// goFiles parses the .go files of dir, or its _test.go files.
func goFiles(dir string, tests bool) ([]*ast.File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") != tests {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// goTestValueFlags are the go test flags that take a value as the next word.
var goTestValueFlags = map[string]bool{
	"run": true, "bench": true, "skip": true, "count": true, "benchtime": true, "timeout": true,
	"cpu": true, "parallel": true, "tags": true, "coverprofile": true, "cpuprofile": true,
	"memprofile": true, "blockprofile": true, "mutexprofile": true, "trace": true, "o": true,
	"p": true, "exec": true, "covermode": true, "coverpkg": true, "list": true, "fuzz": true,
	"fuzztime": true, "outputdir": true, "shuffle": true, "vet": true,
}

// goTestBoolFlags take no value.
var goTestBoolFlags = map[string]bool{
	"v": true, "benchmem": true, "race": true, "short": true, "cover": true, "failfast": true,
	"json": true, "x": true, "n": true, "a": true, "msan": true, "asan": true, "fullpath": true,
}

// checkGoTest checks a go test command's packages and -run/-bench patterns.
func checkGoTest(root string, line int, args []string, ps *readmeProblems) {
	var run, bench string
	var haveRun, haveBench bool
	var pkgs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			pkgs = append(pkgs, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case goTestBoolFlags[name]:
		case goTestValueFlags[name]:
			if !hasVal {
				if i+1 == len(args) {
					ps.add(line, "go test -%s needs a value", name)
					return
				}
				i++
				val = args[i]
			}
		default:
			ps.add(line, "go test: flag -%s is not one this test knows; is it a go test flag?", name)
			return
		}
		switch name {
		case "run":
			run, haveRun = val, true
		case "bench":
			bench, haveBench = val, true
		}
	}
	if len(pkgs) == 0 {
		pkgs = []string{"."}
	}
	var tests, benches []string
	found := 0
	for _, p := range pkgs {
		if !strings.HasPrefix(p, "./") && p != "." {
			ps.add(line, "go test %s: write packages as ./dir/ from the module root", p)
			continue
		}
		dirs, err := packageDirs(root, p)
		if err != nil || len(dirs) == 0 {
			ps.add(line, "go test %s: no such package (%v)", p, err)
			continue
		}
		found++
		for _, d := range dirs {
			files, err := goFiles(d, true)
			if err != nil {
				ps.add(line, "go test %s: %v", p, err)
				continue
			}
			for _, f := range files {
				for _, decl := range f.Decls {
					fd, ok := decl.(*ast.FuncDecl)
					if !ok || fd.Recv != nil {
						continue
					}
					switch n := fd.Name.Name; {
					case strings.HasPrefix(n, "Benchmark"):
						benches = append(benches, n)
					case strings.HasPrefix(n, "Test"), strings.HasPrefix(n, "Example"), strings.HasPrefix(n, "Fuzz"):
						tests = append(tests, n)
					}
				}
			}
		}
	}
	if found == 0 {
		return
	}
	if haveRun {
		checkPattern(line, "-run", run, tests, pkgs, ps)
	}
	if haveBench {
		checkPattern(line, "-bench", bench, benches, pkgs, ps)
	}
}

// packageDirs are the directories a package pattern names.
func packageDirs(root, p string) ([]string, error) {
	base, all := strings.CutSuffix(strings.TrimSuffix(p, "/"), "/...")
	if base == "." || base == "./..." {
		base, all = ".", all || base == "./..."
	}
	dir := filepath.Join(root, filepath.FromSlash(base))
	if !all {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("no directory %s", base)
		}
		return []string{dir}, nil
	}
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != dir && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	return dirs, err
}

// checkPattern checks that every alternative of the pattern's first level
// matches one of names. "^$" is the idiom for none.
func checkPattern(line int, flag, pattern string, names []string, pkgs []string, ps *readmeProblems) {
	first, _, _ := strings.Cut(pattern, "/")
	if first == "^$" {
		return
	}
	if _, err := regexp.Compile(first); err != nil {
		ps.add(line, "go test %s %s: %v", flag, pattern, err)
		return
	}
	for _, alt := range alternatives(first) {
		re, err := regexp.Compile(alt)
		if err != nil {
			ps.add(line, "go test %s %s: %q: %v", flag, pattern, alt, err)
			continue
		}
		if !slices.ContainsFunc(names, re.MatchString) {
			what := "test"
			if flag == "-bench" {
				what = "benchmark"
			}
			ps.add(line, "go test %s %s: %q matches no %s in %s", flag, pattern, alt, what, strings.Join(pkgs, " "))
		}
	}
}

// alternatives splits a regexp at its top-level |.
func alternatives(re string) []string {
	var alts []string
	depth, start := 0, 0
	for i := 0; i < len(re); i++ {
		switch re[i] {
		case '\\':
			i++
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case '|':
			if depth == 0 {
				alts = append(alts, re[start:i])
				start = i + 1
			}
		}
	}
	return append(alts, re[start:])
}

// checkCommands checks every command of every sh block outside the HTTP
// examples, every inline go test command and every inline repository path.
func checkCommands(root string, blocks []mdBlock, spans []mdSpan, ps *readmeProblems) (used map[string]bool) {
	used = map[string]bool{}
	mark := func(cmd string) {
		for _, n := range readmeNotRun {
			if cmd == n.cmd || strings.HasPrefix(cmd, n.cmd+" ") {
				used[n.cmd] = true
			}
		}
	}
	for _, b := range blocks {
		if b.lang != "sh" && b.lang != "bash" && b.lang != "shell" {
			continue
		}
		if curlBlock(b) {
			for _, c := range shCommands(b) {
				mark(c.text)
			}
			continue
		}
		for _, c := range shCommands(b) {
			mark(c.text)
			checkCommand(root, c, ps)
		}
	}
	top, _ := os.ReadDir(root)
	for _, s := range spans {
		if strings.HasPrefix(s.text, "go test ") {
			checkCommand(root, shCommand{line: s.line, text: s.text}, ps)
			continue
		}
		first, _, isPath := strings.Cut(s.text, "/")
		if !isPath || strings.ContainsAny(s.text, " *?{}<>:+") || !slices.ContainsFunc(top, func(e os.DirEntry) bool { return e.Name() == first }) {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(s.text))); err != nil {
			ps.add(s.line, "`%s`: no such file in the repository", s.text)
		}
	}
	return used
}

// TestREADMECommands checks the commands that are not run.
func TestREADMECommands(t *testing.T) {
	t.Parallel() // each builds or serves on its own: a scratch folder, a free port
	blocks, spans := readREADME(t)
	var ps readmeProblems
	used := checkCommands(moduleRoot, blocks, spans, &ps)
	ps.report(t)
	for _, n := range readmeNotRun {
		if !used[n.cmd] {
			t.Errorf("readmeNotRun lists %q, which no page has any more: remove it", n.cmd)
		}
		t.Logf("not run: %s: %s", n.cmd, n.why)
	}
}

// TestREADMEGoClientRuns runs the Go client example (docs/go-client.md) as written,
// with its Redis address pointed at a private redis-server: run creates the
// limiter, opens a handle and takes permits until its context ends, which
// is the only error it may return.
func TestREADMEGoClientRuns(t *testing.T) {
	t.Parallel() // each builds or serves on its own: a scratch folder, a free port
	if testing.Short() {
		// It links and runs a program of the client and a Redis: the
		// quick check leaves that out; TestREADMEGo compiles the block.
		t.Skip("builds and runs the example as a program: left out of -short")
	}
	srv := redistest.Server(t)
	blocks, _ := readREADME(t)
	i := slices.IndexFunc(blocks, func(b mdBlock) bool {
		return b.lang == "go" && slices.Contains(b.lines, "func run(ctx context.Context) error {")
	})
	if i < 0 {
		t.Fatal("no page has a go block with func run(ctx context.Context) error")
	}
	const readmeRedis = "redis://127.0.0.1:6379"
	src := snippetFile(blocks[i])
	if !strings.Contains(src, readmeRedis) {
		t.Fatalf("the client example does not connect to %s", readmeRedis)
	}
	src = strings.Replace(src, readmeRedis, "redis://"+srv.Addr(), 1)
	// run takes permits until its context ends: here, once Redis shows ten
	// taken, however long a busy machine takes to get there (a minute is a
	// hang).
	src = strings.Replace(src, "\nfunc main() {}\n", "\n", 1) + `
func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		defer cancel()
		rdb, err := store.NewClient("redis://` + srv.Addr() + `")
		if err != nil {
			panic(err)
		}
		defer rdb.Close()
		for ctx.Err() == nil {
			if w, err := store.New(rdb).Wait(ctx, "orders"); err == nil && w.Permits >= 10 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	if err := run(ctx); !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, limiter.ErrDeadline) {
		panic(err)
	}
}
`
	root, dir := moduleScratch(t, "_readme-run-")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := goCommand(ctx, t, root, "run", "./"+filepath.ToSlash(rel)).CombinedOutput(); err != nil {
		t.Fatalf("the Go client example, run: %v\n%s", err, out)
	}
	// It created the limiter and took permits from it (ten were seen taken;
	// Close hands back what the pool had not dispensed, so fewer may stay).
	w, err := store.New(srv.Client()).Wait(context.Background(), "orders")
	if err != nil || w.Permits < 1 {
		t.Errorf("after the example ran, orders: %+v, %v (want permits taken)", w, err)
	}
}

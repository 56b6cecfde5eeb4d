package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

// TestBenchTablesScript: scripts/bench-tables.sh, which prints docs/performance.md's
// performance tables, is executable and valid bash, and every benchmark and
// test it runs exists in the package it names, so that a renamed benchmark
// breaks here rather than in the script's next run.
func TestBenchTablesScript(t *testing.T) {
	path := filepath.Join("..", "..", "scripts", "bench-tables.sh")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&0o111 == 0 {
		t.Errorf("%s is not executable", path)
	}
	if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", path, err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	runs := regexp.MustCompile(`(?:bench (\./\w+/) '?([\w|]+)'?|-run (Test\w+) -v (\./\w+/))`).FindAllStringSubmatch(string(b), -1)
	if len(runs) < 4 {
		t.Fatalf("found %d benchmark runs in %s, want the store, client, limiter and instruction tables", len(runs), path)
	}
	for _, r := range runs {
		pkg, names := r[1], r[2]
		if r[3] != "" {
			pkg, names = r[4], r[3]
		}
		src := testSources(t, filepath.Join("..", "..", pkg))
		for _, name := range strings.Split(names, "|") {
			if !strings.Contains(src, "func "+name+"(") {
				t.Errorf("%s runs %s in %s, which has no such function", path, name, pkg)
			}
		}
	}
}

func testSources(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no tests in %s: %v", dir, err)
	}
	var all strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	return all.String()
}

// TestStoreVsScript runs scripts/store-vs.sh, which docs/performance.md gives for
// comparing the store with another build of it, against this very commit,
// one short round per row: it builds both trees under their module paths,
// starts its own redis-servers and prints every row with a speed and a CPU
// time per acquire.
func TestStoreVsScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two trees and runs them; the full run covers it")
	}
	redistest.Require(t, "redis-server", "git")
	root := filepath.Join("..", "..")
	if err := exec.Command("git", "-C", root, "rev-parse", "--verify", "HEAD").Run(); err != nil {
		t.Skip("not a git checkout: store-vs.sh compares commits")
	}
	cmd := exec.Command("bash", filepath.Join("scripts", "store-vs.sh"), "HEAD")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "ROUNDS=1", "ROUND=20ms")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("store-vs.sh HEAD: %v\n%s", err, out)
	}
	rows := regexp.MustCompile(`(?m)^\| [^|]+ \| \*\*[0-9.]+×\*\* \([0-9.]+–[0-9.]+\) \| [0-9.]+ \| [0-9.]+ \| \*\*[0-9.]+×\*\* \([0-9.]+–[0-9.]+\) \| [0-9.]+ \+ [0-9.]+ \| [0-9.]+ \+ [0-9.]+ \|$`).FindAllString(string(out), -1)
	if len(rows) != 4 {
		t.Errorf("store-vs.sh HEAD printed %d rows with a speed and CPU per acquire, want 4:\n%s", len(rows), out)
	}
}

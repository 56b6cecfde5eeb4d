package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBenchTablesScript: scripts/bench-tables.sh, which prints the README's
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

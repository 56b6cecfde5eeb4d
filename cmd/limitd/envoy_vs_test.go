package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

// envoyVsEnv runs TestEnvoyVsScript: the script builds the reference rate
// limit server from the Go module proxy, which CI may not reach.
const envoyVsEnv = "LIMITD_ENVOY_VS"

// TestEnvoyVsProgram: scripts/envoy-vs.sh is executable and valid bash, and
// the program it builds (scripts/_envoyvs, which go vet ./... skips)
// compiles and passes vet against this tree, so that a change of grpcapi or
// store that breaks it fails here rather than in the script's next run.
func TestEnvoyVsProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the program; the full run covers it")
	}
	root := filepath.Join("..", "..")
	path := filepath.Join(root, "scripts", "envoy-vs.sh")
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
	vet := exec.Command("go", "vet", "./scripts/_envoyvs")
	vet.Dir = root
	if out, err := vet.CombinedOutput(); err != nil {
		t.Fatalf("go vet ./scripts/_envoyvs: %v\n%s", err, out)
	}
}

// TestEnvoyVsScript runs scripts/envoy-vs.sh, which docs/performance.md gives for
// measuring the gRPC front end against the Envoy reference rate limit
// server, with QUICK=1 (one short round per row), when LIMITD_ENVOY_VS=1:
// it builds the reference and limitd, starts its own redis-server and both
// servers, and must print every row of both tables, the reference issuing
// INCRBY and EXPIRE once per call and limitd INCRBY without a script (a
// script in fewer than one call in a hundred, the fallback, is listed
// without "inside:"), and no call refused, answered wrong or left uncounted
// (the script fails on any).
func TestEnvoyVsScript(t *testing.T) {
	if os.Getenv(envoyVsEnv) != "1" {
		t.Skip(envoyVsEnv + "=1 runs it: it builds the reference rate limit server from the Go module proxy")
	}
	redistest.Require(t, "redis-server", "git")
	cmd := exec.Command("bash", filepath.Join("scripts", "envoy-vs.sh"))
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "QUICK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("QUICK=1 envoy-vs.sh: %v\n%s", err, out)
	}
	const (
		row   = `\| (?:1|16|64), (?:hot|10,000 keys) \| `
		ratio = `\*\*[0-9.]+×\*\* \([0-9.]+–[0-9.]+\)`
		us    = `[0-9.]+ µs`
	)
	for _, c := range []struct{ what, re string }{
		{"calls/s and Redis CPU", `(?m)^` + row + `[0-9,]+ \| [0-9,]+ \| ` + ratio + ` \| ` + us + ` \| ` + us + ` \| ` + ratio + ` \|$`},
		{"commands and process CPU", `(?m)^` + row + `[^|;]*\bincrby [0-9.]+[^|;]* \| [0-9.]+ \| [^|]*\bincrby 1\.00\b[^|]* \| [0-9.]+ \| ` + us + ` \| ` + us + ` \|$`},
		{"driver and machine CPU", `(?m)^` + row + us + ` \| ` + us + ` \| ` + us + ` \| ` + us + ` \| [0-9]\.[0-9]{2} \| [0-9]\.[0-9]{2} \| ` + ratio + ` \|$`},
	} {
		if n := len(regexp.MustCompile(c.re).FindAllString(string(out), -1)); n != 6 {
			t.Errorf("envoy-vs.sh printed %d rows of %s, want 6:\n%s", n, c.what, out)
		}
	}
	for _, side := range []string{"limitd", "reference"} {
		if !regexp.MustCompile(`(?m)^` + side + `: [0-9,]+ calls answered OK and counted, 0 errors, 0 wrong answers\.$`).Match(out) {
			t.Errorf("envoy-vs.sh did not report every %s call answered OK and counted:\n%s", side, out)
		}
	}
}

package refenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Ignored variables set are named; those set off are not.
func TestCheckNotices(t *testing.T) {
	notices, err := Check(map[string]string{"USE_STATSD": "false", "USE_DOG_STATSD": "true", "GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt", "EXPIRATION_JITTER_MAX_SECONDS": "300"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range notices {
		names = append(names, strings.SplitN(n, ":", 2)[0])
	}
	if got := strings.Join(names, " "); got != "USE_DOG_STATSD EXPIRATION_JITTER_MAX_SECONDS GRPC_SERVER_TLS_CA_CERT" {
		t.Errorf("named %s", got)
	}
}

// refTableRow is a docs/envoy.md table row of refVars' v.
func refTableRow(v refVar) string {
	return "| `" + v.name + "` | " + string(v.status) + " | " + v.what + " |"
}

// The table of the reference's variables in docs/envoy.md is refVars, and refVars
// holds every variable of the reference's settings.go, in its order (read
// from the module cache when the reference's source is there).
func TestRatelimitREADMETable(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "envoy.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for line := range strings.SplitSeq(string(readme), "\n") {
		if m := regexp.MustCompile("^\\| `([A-Z0-9_]+)` \\| (honoured|ignored|refused) \\|").FindStringSubmatch(line); m != nil {
			rows = append(rows, line)
		}
	}
	var want []string
	for _, v := range refVars {
		want = append(want, refTableRow(v))
	}
	if !slices.Equal(rows, want) {
		t.Errorf("docs/envoy.md's table of the reference's variables differs from refVars; it should read:\n%s", strings.Join(want, "\n"))
	}
	for n := range strayVars {
		if !strings.Contains(string(readme), "`"+n+"`") {
			t.Errorf("docs/envoy.md does not name %s", n)
		}
	}

	// The reference's own list, where its source is at hand.
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "github.com", "envoyproxy", "ratelimit@*", "src", "settings", "settings.go"))
	if len(files) == 0 {
		t.Skip("the reference's source is not in the module cache (go mod download github.com/envoyproxy/ratelimit@latest)")
	}
	src, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	var theirs []string
	for _, m := range regexp.MustCompile(`envconfig:"([A-Z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
		theirs = append(theirs, m[1])
	}
	// refVars follows the reference's newest source, so an older release in
	// the cache may lack some of its variables; every one it has must be in
	// refVars, in its order.
	var ours []string
	for _, v := range refVars {
		ours = append(ours, v.name)
	}
	var newer []string
	i := 0
	for _, n := range ours {
		if i < len(theirs) && n == theirs[i] {
			i++
		} else {
			newer = append(newer, n)
		}
	}
	if i < len(theirs) {
		t.Errorf("refVars lacks the reference's %s (%s), or has it out of the reference's order:\nours   %v\ntheirs %v", theirs[i], files[len(files)-1], ours, theirs)
	}
	if len(newer) > 0 {
		t.Logf("refVars has %v, which %s does not", newer, files[len(files)-1])
	}
}

// Package metricstest holds a front end's metrics against the table of
// docs/operations.md, which names every limitd_ metric with its type.
package metricstest

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
)

// CheckTable checks that every metric a front end serves (served: name →
// type, as Prometheus writes it) is in the table with its type, and that
// every metric of the table the front end owns (owns says) is served. who
// names the front end in errors.
func CheckTable(t testing.TB, who string, served map[string]string, owns func(name string) bool) {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(here), "../../../docs/operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(limitd_[a-z_]+)` \\| ([a-z]+)").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = m[2]
	}
	for name, typ := range served {
		if d, ok := documented[name]; !ok || d != typ {
			t.Errorf("%s serves %s (%s); docs/operations.md's table says %q", who, name, typ, d)
		}
	}
	for name := range documented {
		if _, ok := served[name]; owns(name) && !ok {
			t.Errorf("docs/operations.md's table names %s, which %s does not serve", name, who)
		}
	}
}

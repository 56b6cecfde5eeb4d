package grpcapi

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics table of docs/operations.md names every metric of the gRPC front end, with
// its type, and no other of its prefixes.
func TestMetricsTableInREADME(t *testing.T) {
	readme, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(limitd_(?:grpc|ratelimit)_[a-z_]+)` \\| ([a-z]+)").FindAllStringSubmatch(string(readme), -1) {
		documented[m[1]] = m[2]
	}
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.series("d", "r")
	m.requests.WithLabelValues("OK")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]string{}
	for _, f := range families {
		served[f.GetName()] = strings.ToLower(f.GetType().String())
	}
	if len(served) != 9 {
		t.Errorf("%d metrics served, want 9: %v", len(served), served)
	}
	for name, typ := range served {
		if documented[name] != typ {
			t.Errorf("the front end serves %s (%s); docs/operations.md's table says %q", name, typ, documented[name])
		}
	}
	for name := range documented {
		if _, ok := served[name]; !ok {
			t.Errorf("docs/operations.md's table names %s, which the front end does not serve", name)
		}
	}
}

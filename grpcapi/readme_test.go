package grpcapi

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/internal/testkit/metricstest"
)

// The metrics table of docs/operations.md names every metric of the gRPC front end, with
// its type, and no other of its prefixes.
func TestMetricsTableInREADME(t *testing.T) {
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
	metricstest.CheckTable(t, "the front end", served, func(name string) bool {
		return strings.HasPrefix(name, "limitd_grpc_") || strings.HasPrefix(name, "limitd_ratelimit_")
	})
}

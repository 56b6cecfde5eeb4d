// Package alerttest runs the shipped Prometheus alert rules in promtool over
// series a test has read from a limitd, so that a test can check that an
// alert fires on what /metrics really served.
package alerttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

// SaturatedFires runs the LimitdSaturated rule of the alert file at alerts
// (deploy/prometheus/limitd-alerts.yml: its expression and its for:) in
// promtool over the series limitd_limiter_utilization{limiter} held at value
// for 20 minutes, and fails t unless it fires for limiter. A missing promtool
// skips t, or fails it when LIMITD_REQUIRE_REDIS=1 (CI has every tool).
func SaturatedFires(t testing.TB, alerts, limiter string, value float64) {
	t.Helper()
	promtool := Promtool(t, "run the alert on the served series")
	b, err := os.ReadFile(alerts)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var rule map[string]any
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r["alert"] == "LimitdSaturated" {
				rule = r
			}
		}
	}
	if rule == nil {
		t.Fatalf("%s has no LimitdSaturated", alerts)
	}
	dir := t.TempDir()
	// The rule as shipped, its labels and annotations left out so that the
	// test compares what fires, not its wording.
	rules := map[string]any{"groups": []any{map[string]any{"name": "t", "rules": []any{
		map[string]any{"alert": "LimitdSaturated", "expr": rule["expr"], "for": rule["for"]}}}}}
	tests := map[string]any{"rule_files": []string{"rules.yml"}, "evaluation_interval": "1m", "tests": []any{map[string]any{
		"interval": "1m",
		"input_series": []any{map[string]any{
			"series": fmt.Sprintf(`limitd_limiter_utilization{job="limitd",instance="a:8080",limiter=%q}`, limiter),
			"values": fmt.Sprintf("%vx20", value)}},
		"alert_rule_test": []any{map[string]any{"eval_time": "15m", "alertname": "LimitdSaturated",
			"exp_alerts": []any{map[string]any{"exp_labels": map[string]string{"limiter": limiter}}}}},
	}}}
	for name, v := range map[string]any{"rules.yml": rules, "tests.yml": tests} {
		out, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(promtool, "test", "rules", "tests.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("LimitdSaturated on limitd_limiter_utilization{limiter=%q} %v: %v\n%s", limiter, value, err, out)
	}
}

// Promtool is the path of promtool (Debian's prometheus package); a
// missing one skips t, or fails it when LIMITD_REQUIRE_REDIS=1
// (redistest.Missing). what is what the test needs it for.
func Promtool(t testing.TB, what string) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		redistest.Missing(t, "promtool not installed: apt-get install -y prometheus to "+what)
	}
	return p
}

package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/limitd/limitd/internal/testkit/alerttest"
)

var (
	alertRulesDir  = filepath.Join(moduleRoot, "deploy", "prometheus")
	alertRulesFile = "limitd-alerts.yml"
	alertTestsFile = "limitd-alerts.test.yml"
)

// The alert rules pass promtool check rules, and their unit tests promtool
// test rules (Debian's prometheus package; a missing promtool skips, or
// fails with LIMITD_REQUIRE_REDIS=1 as in CI).
func TestDeployAlertRulesPromtool(t *testing.T) {
	promtool := alerttest.Promtool(t, "check and test the alert rules")
	for _, args := range [][]string{{"check", "rules", alertRulesFile}, {"test", "rules", alertTestsFile}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = alertRulesDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// alertRules are the alerts of the rules file, by name.
func alertRules(t *testing.T) map[string]map[string]any {
	t.Helper()
	docs := yamlDocs(t, filepath.Join(alertRulesDir, alertRulesFile))
	rules := map[string]map[string]any{}
	for _, g := range at(docs[0], "groups").([]any) {
		for _, r := range at(g, "rules").([]any) {
			r := r.(map[string]any)
			if name, _ := r["alert"].(string); name != "" {
				rules[name] = r
			}
		}
	}
	return rules
}

// Every alert has a unit test where it fires and one where it stays silent
// (an under-used limiter among the series), every test names an alert of
// the file, and the set is the one the operator docs promise; none fires on
// under-use, so no rule reads the backlog or the lateness of grants.
func TestDeployAlertTestsBothWays(t *testing.T) {
	rules := alertRules(t)
	want := []string{"LimitdDown", "LimitdRedisDataLost", "LimitdRedisUnavailable", "LimitdRefusing", "LimitdSaturated", "LimitdSlowRedis"}
	var names []string
	for n, r := range rules {
		names = append(names, n)
		expr, _ := r["expr"].(string)
		for _, underUse := range []string{"limitd_limiter_backlog_seconds", "limitd_acquire_lateness_seconds"} {
			if strings.Contains(expr, underUse) {
				t.Errorf("%s reads %s, which grows when a limiter is used below its rate", n, underUse)
			}
		}
		if at(r, "annotations", "summary") == nil || !strings.Contains(at(r, "annotations", "description").(string), "Runbook:") {
			t.Errorf("%s: want a summary and a description with a Runbook: line", n)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("alerts %v, want %v", names, want)
	}
	docs := yamlDocs(t, filepath.Join(alertRulesDir, alertTestsFile))
	if files := toStrings(at(docs[0], "rule_files")); !slices.Equal(files, []string{alertRulesFile}) {
		t.Errorf("the tests load %v, want %s", files, alertRulesFile)
	}
	fires, silent := map[string]int{}, map[string]int{}
	underUsed := map[string]bool{}
	for _, tc := range at(docs[0], "tests").([]any) {
		group, _ := at(tc, "name").(string)
		for _, s := range at(tc, "input_series").([]any) {
			series, _ := at(s, "series").(string)
			values, _ := at(s, "values").(string)
			switch {
			case strings.HasPrefix(series, "limitd_limiter_utilization{") && strings.HasPrefix(values, "0.5x"),
				strings.HasPrefix(series, "limitd_limiter_backlog_seconds{") && !strings.HasPrefix(values, "0x"):
				underUsed[group] = true
			}
		}
		for _, a := range at(tc, "alert_rule_test").([]any) {
			name, _ := at(a, "alertname").(string)
			if rules[name] == nil {
				t.Errorf("test %q: alert %q is not in %s", group, name, alertRulesFile)
			}
			exp, _ := at(a, "exp_alerts").([]any)
			switch {
			case len(exp) > 0:
				fires[name]++
				for _, e := range exp {
					if at(e, "exp_labels", "severity") == nil || at(e, "exp_annotations", "summary") == nil {
						t.Errorf("test %q: %s fires without its severity label and summary checked", group, name)
					}
				}
			case underUsed[group]:
				silent[name]++
			}
		}
	}
	for _, n := range want {
		if fires[n] == 0 {
			t.Errorf("%s: no test where it fires", n)
		}
		if silent[n] == 0 {
			t.Errorf("%s: no test where it stays silent on an under-used limiter (utilization 0.5, a backlog)", n)
		}
	}
}

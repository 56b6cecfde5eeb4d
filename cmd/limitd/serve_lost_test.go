package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// metricsText is GET /metrics' body.
func metricsText(t *testing.T, base string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Redis emptied under a running limitd with a boot file: /readyz answers
// 503 from the first probe after the loss until the boot file is applied
// again, the loss is logged once at ERROR and counted in
// limitd_redis_data_lost_total.
func TestServeDataLost(t *testing.T) {
	for _, withFile := range []bool{true, false} {
		mini := miniredis.RunT(t)
		env := map[string]string{"LIMITD_REDIS_URL": "redis://" + mini.Addr()}
		if withFile {
			env["LIMITD_CONFIG"] = writeFile(t, "boot.yaml", exampleBoot)
		}
		base, logs, stop := startServe(t, env)
		waitStatus(t, base+"/readyz", http.StatusOK, 5*time.Second)
		if !mini.Exists("limitd:boot") {
			t.Fatalf("file %v: no marker written at start:\n%s", withFile, logs)
		}
		if m := metricsText(t, base); !strings.Contains(m, "limitd_redis_data_lost_total 0\n") {
			t.Errorf("file %v: limitd_redis_data_lost_total not 0 before a loss", withFile)
		}
		mini.FlushAll()
		if withFile {
			// Found by the probe itself, before the keeper's next check:
			// the marker is gone, so the boot file's limiters are.
			if got := get(t, base+"/readyz"); got != http.StatusServiceUnavailable {
				t.Errorf("/readyz right after FLUSHALL = %d, want 503", got)
			}
		}
		waitStatus(t, base+"/readyz", http.StatusOK, 10*time.Second)
		if withFile {
			if got := get(t, base+"/v1/limiters/orders"); got != http.StatusOK {
				t.Errorf("the boot file's limiter once ready again = %d, want 200", got)
			}
		}
		if !mini.Exists("limitd:boot") {
			t.Errorf("file %v: the marker was not written again", withFile)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(metricsText(t, base), "limitd_redis_data_lost_total 1\n") {
			if time.Now().After(deadline) {
				t.Fatalf("file %v: limitd_redis_data_lost_total not 1:\n%s", withFile, logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for !strings.Contains(logs.String(), "level=ERROR") {
			if time.Now().After(deadline) {
				break // said below
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		l := logs.String()
		if n := strings.Count(l, "level=ERROR"); n != 1 || !strings.Contains(l, "redis lost limitd's data") {
			t.Errorf("file %v: %d ERROR lines, want one telling the loss:\n%s", withFile, n, l)
		}
	}
}

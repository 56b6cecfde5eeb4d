package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"github.com/limitd/limitd/internal/testkit/tlstest"
	"github.com/limitd/limitd/internal/testkit/xdstest"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
)

// egConfig reads one of Envoy Gateway's translator outputs kept in
// internal/xds/testdata/envoy-gateway (value_to_metric and share_threshold,
// false there, have no field in RateLimitConfig).
func egConfig(t *testing.T, file string) *rlsconfv3.RateLimitConfig {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot, "internal", "xds", "testdata", "envoy-gateway", file))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var strip func(any)
	strip = func(ds any) {
		l, _ := ds.([]any)
		for _, d := range l {
			m := d.(map[string]any)
			delete(m, "value_to_metric")
			delete(m, "share_threshold")
			strip(m["descriptors"])
		}
	}
	strip(doc["descriptors"])
	j, _ := json.Marshal(doc)
	var c rlsconfv3.RateLimitConfig
	if err := protojson.Unmarshal(j, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// limitd ratelimit as Envoy Gateway runs its rate limit deployment: its
// environment, one Secret at /certs for the gRPC port's TLS and the xDS
// client's mutual TLS, and Envoy Gateway's xDS server (go-control-plane's,
// mutual TLS with the same CA, TLS 1.3, as Envoy Gateway configures it).
// Shown: every unit of its translator's output served; an invalid update
// NACKed once in the log and then paced by the back-off (the NACKs
// counted); 5/HOUR with 12 hits changed to 5/SECOND answered OK with 4
// remaining at once; the Secret swapped the kubelet's way and the new
// serial served within 10 s, the reload logged and counted.
func TestRatelimitEnvoyGatewayXDS(t *testing.T) {
	ca := tlstest.NewCA(t, "envoy-gateway")
	crt, key := ca.Leaf(t, "envoy", 100)
	certs := tlstest.NewVolume(t, map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.PEM})

	// Envoy Gateway's xDS server for the rate limit service.
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	serverPair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	mgmt := xdstest.Start(t, &tls.Config{Certificates: []tls.Certificate{serverPair}, NextProtos: []string{"h2"},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: roots, MinVersion: tls.VersionTLS13})
	nacks := mgmt.NACKs

	env := map[string]string{}
	for k, v := range envoyGatewayEnv {
		env[k] = strings.ReplaceAll(v, "/certs/", certs.Dir+"/")
	}
	env["CONFIG_GRPC_XDS_SERVER_URL"] = mgmt.Addr
	env["REDIS_URL"] = miniredis.RunT(t).Addr()
	env["XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"], env["XDS_CLIENT_BACKOFF_MAX_INTERVAL"], env["XDS_CLIENT_BACKOFF_JITTER"] = "500ms", "1s", "false"
	env["PROMETHEUS_ADDR"] = "127.0.0.1:0" // Envoy Gateway's :19001, on a free port
	delete(env, "RUNTIME_ROOT")
	logs, addrs := startRatelimit(t, env)

	// The gRPC port speaks TLS with the Secret's certificate.
	serial := func() (int64, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addrs["grpc_addr"], &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"}})
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
	}
	conn, err := grpc.NewClient(addrs["grpc_addr"], grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "localhost"})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := rlv3.NewRateLimitServiceClient(conn)

	// Every unit of Envoy Gateway's CRD, from its translator's output.
	mgmt.Set(t, "envoy-ratelimit", "1", egConfig(t, "every-unit.yaml"), egConfig(t, "shared-policy.yaml"))
	units := []rlv3.RateLimitResponse_RateLimit_Unit{rlv3.RateLimitResponse_RateLimit_SECOND, rlv3.RateLimitResponse_RateLimit_MINUTE,
		rlv3.RateLimitResponse_RateLimit_HOUR, rlv3.RateLimitResponse_RateLimit_DAY, rlv3.RateLimitResponse_RateLimit_WEEK,
		rlv3.RateLimitResponse_RateLimit_MONTH, rlv3.RateLimitResponse_RateLimit_YEAR}
	eventually(t, "every unit served", func() error {
		for i, u := range units {
			route := fmt.Sprintf("httproute/default/unit-%s/rule/0/match/0/www_example_com", strings.ToLower(u.String()))
			r, err := c.ShouldRateLimit(t.Context(), rlRequest("default/eg/http", route, route, "rule-0-match-0", "rule-0-match-0"))
			if err != nil {
				return err
			}
			if l := r.Statuses[0].CurrentLimit; l.GetUnit() != u || l.GetRequestsPerUnit() != uint32(i+2) || r.OverallCode != rlv3.RateLimitResponse_OK {
				return fmt.Errorf("%v: %v", u, r)
			}
		}
		return nil
	})
	if s, err := serial(); err != nil || s != 100 {
		t.Fatalf("the gRPC port's serial %d, %v; want 100", s, err)
	}

	// An invalid update: NACKed, logged once, the NACKs paced.
	mgmt.Set(t, "envoy-ratelimit", "2", rlConfig("web", "web", "ip", rlsconfv3.RateLimitUnit_UNKNOWN, 1))
	eventually(t, "the invalid update NACKed twice", func() error {
		if n := nacks(); n < 2 {
			return fmt.Errorf("%d NACKs", n)
		}
		return nil
	})
	start := time.Now()
	time.Sleep(2 * time.Second)
	n := nacks()
	// From the second NACK on, one per back-off of at least 500 ms: within
	// the time measured, at most one more per 500 ms (a busy machine sends
	// fewer, never more).
	if most := 2 + int(time.Since(start)/(500*time.Millisecond)) + 1; n > most {
		t.Errorf("%d NACKs within %v of the second, want at most %d", n, time.Since(start), most)
	}
	if lines := strings.Count(logs.String(), "an update is invalid"); lines != 1 {
		t.Errorf("%d log lines for %d NACKs of one update, want 1", lines, n)
	}
	t.Logf("%d NACKs of one invalid update in %v", n, time.Since(start))

	// 5/HOUR with 12 hits, then 5/SECOND: OK with 4 remaining at once.
	perValue := func(unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
		return &rlsconfv3.RateLimitConfig{Name: "web", Domain: "web", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "ip", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: 5}}}}
	}
	waitUnit := func(u rlv3.RateLimitResponse_RateLimit_Unit, probe string) {
		eventually(t, "the rules at "+u.String(), func() error {
			r, err := c.ShouldRateLimit(t.Context(), rlRequest("web", "ip", probe))
			if err != nil {
				return err
			}
			if got := r.Statuses[0].CurrentLimit.GetUnit(); got != u {
				return fmt.Errorf("unit %v", got)
			}
			return nil
		})
	}
	mgmt.Set(t, "envoy-ratelimit", "3", perValue(rlsconfv3.RateLimitUnit_HOUR))
	waitUnit(rlv3.RateLimitResponse_RateLimit_HOUR, "probe-1")
	for range 12 {
		if _, err := c.ShouldRateLimit(t.Context(), rlRequest("web", "ip", "10.0.0.1")); err != nil {
			t.Fatal(err)
		}
	}
	mgmt.Set(t, "envoy-ratelimit", "4", perValue(rlsconfv3.RateLimitUnit_SECOND))
	waitUnit(rlv3.RateLimitResponse_RateLimit_SECOND, "probe-2")
	r, err := c.ShouldRateLimit(t.Context(), rlRequest("web", "ip", "10.0.0.1"))
	if err != nil || r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 4 {
		t.Errorf("after HOUR→SECOND: %v, %v; want OK with 4 remaining", r, err)
	}

	// The Secret swapped the kubelet's way: the new serial within 10 s.
	crt2, key2 := ca.Leaf(t, "envoy", 101)
	certs.Put(map[string][]byte{"tls.crt": crt2, "tls.key": key2, "ca.crt": ca.PEM})
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := serial()
		if err == nil && s == 101 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the swap the gRPC port shows serial %d (%v), want 101", s, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "certificate files changed: reloaded") {
		t.Errorf("no reload logged:\n%s", logs)
	}
	if _, body := fetch(t, "http://"+addrs["debug_addr"]+"/stats"); !strings.Contains(body, `limitd_tls_reloads_total{file="`+env["GRPC_SERVER_TLS_CERT"]+`",result="ok"} 1`) {
		t.Errorf("/stats lacks the reload: %s", grepLines(body, "limitd_tls_reloads_total"))
	}
	if _, err := c.ShouldRateLimit(t.Context(), rlRequest("web", "ip", "10.0.0.2")); err != nil {
		t.Errorf("a call after the swap, on the connection made before: %v", err)
	}
}

// grepLines are the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

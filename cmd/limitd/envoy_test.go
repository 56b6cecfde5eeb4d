package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	"github.com/limitd/limitd/internal/boot"
)

// deploy/envoy.yaml is an Envoy bootstrap as Envoy reads it (its own types
// and validation rules), its rate limit filter asks for a domain that
// deploy/limitd.yaml defines, and its limitd cluster speaks HTTP/2 to the
// gRPC port docker-compose gives limitd.
func TestDeployEnvoyConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(moduleRoot, "deploy", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("Envoy would refuse it: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := b.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var rl ratelimitv3.RateLimit
	found := false
	for _, f := range hcm.HttpFilters {
		if f.GetTypedConfig().UnmarshalTo(&rl) == nil {
			found = true
		}
	}
	if !found {
		t.Fatal("no rate limit filter")
	}
	bf, err := boot.Load(filepath.Join(moduleRoot, "deploy", "limitd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if bf.Rules.Domains() == 0 || !bf.Rules.Has(rl.Domain) {
		t.Errorf("the filter asks for domain %q, which deploy/limitd.yaml does not define", rl.Domain)
	}
	cluster := rl.RateLimitService.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	for _, c := range b.StaticResources.Clusters {
		if c.Name != cluster {
			continue
		}
		port := c.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().GetPortValue()
		if port != 8081 {
			t.Errorf("cluster %s: port %d, want limitd's gRPC port in docker-compose.yml (8081)", cluster, port)
		}
		if _, ok := c.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; !ok {
			t.Errorf("cluster %s does not speak HTTP/2: gRPC needs it", cluster)
		}
		return
	}
	t.Errorf("no cluster %q for the rate limit service", cluster)
}

// envoyExcerpt checks that lines appear in deploy/envoy.yaml, in order; on
// a line that does not, it returns that line's index.
func envoyExcerpt(lines []string) (int, error) {
	data, err := os.ReadFile(filepath.Join(moduleRoot, "deploy", "envoy.yaml"))
	if err != nil {
		return 0, err
	}
	file := strings.Split(string(data), "\n")
	at := 0
	for i, l := range lines {
		for at < len(file) && file[at] != l {
			at++
		}
		if at == len(file) {
			return i, fmt.Errorf("not a line of deploy/envoy.yaml after the ones above: %q", l)
		}
		at++
	}
	return 0, nil
}

// istioFilter checks an Istio EnvoyFilter: its patches' rate limit filter
// is one Envoy reads.
func istioFilter(src string) error {
	var doc struct {
		Kind string `yaml:"kind"`
		Spec struct {
			ConfigPatches []struct {
				ApplyTo string `yaml:"applyTo"`
				Patch   struct {
					Value map[string]any `yaml:"value"`
				} `yaml:"patch"`
			} `yaml:"configPatches"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		return err
	}
	if doc.Kind != "EnvoyFilter" {
		return fmt.Errorf("kind %q", doc.Kind)
	}
	for _, p := range doc.Spec.ConfigPatches {
		if p.ApplyTo != "HTTP_FILTER" {
			continue
		}
		js, err := json.Marshal(p.Patch.Value["typed_config"])
		if err != nil {
			return err
		}
		var rl ratelimitv3.RateLimit
		var a anypb.Any
		if err := protojson.Unmarshal(js, &a); err != nil {
			return err
		}
		if err := a.UnmarshalTo(&rl); err != nil {
			return err
		}
		if err := rl.ValidateAll(); err != nil {
			return err
		}
		if rl.Domain == "" || rl.RateLimitService.GetGrpcService().GetEnvoyGrpc().GetClusterName() == "" {
			return fmt.Errorf("no domain or no cluster: %v", &rl)
		}
		return nil
	}
	return fmt.Errorf("no HTTP_FILTER patch")
}

package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// gatewayPolicy checks an Envoy Gateway BackendTrafficPolicy of a README
// block strictly against the fields of its global rate limit that limitd
// serves (gateway.envoyproxy.io/v1alpha1): every field known, and a rule
// with a limit.
func gatewayPolicy(src string) error {
	type metadataSource struct {
		Namespace string `yaml:"namespace"`
		Key       string `yaml:"key"`
	}
	type costSpecifier struct {
		From     string          `yaml:"from"`
		Number   *uint64         `yaml:"number"`
		Metadata *metadataSource `yaml:"metadata"`
	}
	type header struct {
		Name  string `yaml:"name"`
		Type  string `yaml:"type"`
		Value string `yaml:"value"`
	}
	type rule struct {
		ClientSelectors []struct {
			Headers []header `yaml:"headers"`
		} `yaml:"clientSelectors"`
		Limit struct {
			Requests uint32 `yaml:"requests"`
			Unit     string `yaml:"unit"`
		} `yaml:"limit"`
		Cost *struct {
			Request  *costSpecifier `yaml:"request"`
			Response *costSpecifier `yaml:"response"`
		} `yaml:"cost"`
	}
	var doc struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name      string `yaml:"name"`
			Namespace string `yaml:"namespace"`
		} `yaml:"metadata"`
		Spec struct {
			TargetRefs []struct {
				Group string `yaml:"group"`
				Kind  string `yaml:"kind"`
				Name  string `yaml:"name"`
			} `yaml:"targetRefs"`
			RateLimit struct {
				Type   string `yaml:"type"`
				Global struct {
					Rules []rule `yaml:"rules"`
				} `yaml:"global"`
			} `yaml:"rateLimit"`
		} `yaml:"spec"`
	}
	dec := yaml.NewDecoder(bytes.NewReader([]byte(src)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return err
	}
	switch {
	case doc.APIVersion != "gateway.envoyproxy.io/v1alpha1" || doc.Kind != "BackendTrafficPolicy":
		return fmt.Errorf("%s %s, want gateway.envoyproxy.io/v1alpha1 BackendTrafficPolicy", doc.APIVersion, doc.Kind)
	case doc.Spec.RateLimit.Type != "Global" || len(doc.Spec.RateLimit.Global.Rules) == 0:
		return fmt.Errorf("want a Global rate limit with rules")
	}
	units := map[string]bool{"Second": true, "Minute": true, "Hour": true, "Day": true, "Month": true, "Year": true}
	for i, r := range doc.Spec.RateLimit.Global.Rules {
		if !units[r.Limit.Unit] || r.Limit.Requests == 0 {
			return fmt.Errorf("rules[%d].limit: %+v", i, r.Limit)
		}
		if r.Cost == nil {
			continue
		}
		for name, c := range map[string]*costSpecifier{"request": r.Cost.Request, "response": r.Cost.Response} {
			switch {
			case c == nil:
			case c.From == "Number" && c.Number != nil && c.Metadata == nil:
			case c.From == "Metadata" && c.Metadata != nil && c.Metadata.Key != "" && c.Number == nil:
			default:
				return fmt.Errorf("rules[%d].cost.%s: from Number with a number, or from Metadata with a metadata key", i, name)
			}
		}
	}
	return nil
}

// The policy check finds a policy that is wrong.
func TestGatewayPolicyCheckFails(t *testing.T) {
	good := `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: p}
spec:
  rateLimit:
    type: Global
    global:
      rules:
        - limit: {requests: 10, unit: Minute}
          cost: {request: {from: Number, number: 0}}
`
	if err := gatewayPolicy(good); err != nil {
		t.Fatalf("a good policy: %v", err)
	}
	for _, bad := range []string{
		strings.Replace(good, "BackendTrafficPolicy", "ClientTrafficPolicy", 1),
		strings.Replace(good, "Minute", "Fortnight", 1),
		strings.Replace(good, "from: Number, number: 0", "from: Metadata", 1),
		strings.Replace(good, "cost:", "costs:", 1),
	} {
		if gatewayPolicy(bad) == nil {
			t.Errorf("no error for\n%s", bad)
		}
	}
}

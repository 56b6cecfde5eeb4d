package api_test

import (
	"strings"
	"testing"
)

// A template carries a description, what displays call it (an Envoy rule's
// descriptors), through PUT and GET; a bad one is a 400 naming the field.
func TestTemplateDescription(t *testing.T) {
	e := newEnv(t)
	r := e.must(201, "PUT", "/v1/templates/envoy.mongo-cps.caba97696b0e", `{"pattern":"envoy.mongo-cps.caba97696b0e:*","limiter":{"kind":"window","limit":500,"period":"1s"},"description":"mongo_cps.database_users"}`)
	if !strings.Contains(r.String(), `"description":"mongo_cps.database_users"`) {
		t.Errorf("PUT: %s", r)
	}
	for _, path := range []string{"/v1/templates/envoy.mongo-cps.caba97696b0e", "/v1/templates"} {
		if r := e.must(200, "GET", path, nil); !strings.Contains(r.String(), `"description":"mongo_cps.database_users"`) {
			t.Errorf("GET %s: %s", path, r)
		}
	}
	r = e.bad("PUT", "/v1/templates/t", `{"pattern":"t:*","limiter":{"rate":1},"description":"`+strings.Repeat("x", 201)+`"}`)
	if p := r.problem(t); r.code != 400 || p.Field != "description" {
		t.Errorf("a 201-character description: %s, want 400 naming description", r)
	}
}

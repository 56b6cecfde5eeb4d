package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

func TestOpenAPIValid(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(openapiFile())
	if err != nil {
		t.Fatalf("loading openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not valid OpenAPI 3: %v", err)
	}
	if _, err := specRouter(); err != nil {
		t.Fatalf("routing openapi.yaml: %v", err)
	}
	// Every operation documents its errors as problem+json, but HEAD,
	// whose answers have no body.
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if method == http.MethodHead {
				continue
			}
			for code, ref := range op.Responses.Map() {
				if code[0] != '4' && code[0] != '5' || code == "429" {
					continue
				}
				if ref.Value.Content.Get("application/problem+json") == nil {
					t.Errorf("%s %s: %s is not application/problem+json", method, path, code)
				}
			}
		}
	}
}

package envoyrules

import (
	"bytes"
	"testing"

	"gopkg.in/yaml.v3"
)

// parseDomains decodes a boot file's domains: list strictly, as the boot
// file does.
func parseDomains(t *testing.T, src string) []Domain {
	t.Helper()
	var doc struct {
		Domains []Domain `yaml:"domains"`
	}
	dec := yaml.NewDecoder(bytes.NewReader([]byte(src)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("domains: %v", err)
	}
	return doc.Domains
}

// compile compiles a domains: list, failing the test on an error.
func compile(t *testing.T, src string) *Rules {
	t.Helper()
	r, err := Compile(parseDomains(t, src))
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return r
}

package envoyrules

import "testing"

// Dump prints the rules as the reference's /rlconfig does (its
// rateLimitDescriptor.dump: "<domain>.<key>_<value>...: unit=... "), in the
// config's order, and each rule's template carries the same name.
func TestDumpAsReference(t *testing.T) {
	r := compile(t, `
domains:
  - domain: mongo_cps
    descriptors:
      - key: database
        value: users
        rate_limit: {unit: second, requests_per_unit: 500}
      - key: database
        value: default
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 500}
  - domain: messaging
    descriptors:
      - key: message_type
        value: marketing
        descriptors:
          - key: to_number
            quota_mode: true
            rate_limit: {unit: day, requests_per_unit: 5}
      - key: to_number
        rate_limit: {unlimited: true}
      - key: api
        limiter: {kind: smooth, rate: 2.5}
`)
	want := `mongo_cps.database_users: unit=SECOND requests_per_unit=500, shadow_mode: false, quota_mode: false
mongo_cps.database_default: unit=SECOND requests_per_unit=500, shadow_mode: true, quota_mode: false
messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=5, shadow_mode: false, quota_mode: true
messaging.to_number: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false
messaging.api: unit=MINUTE requests_per_unit=150, shadow_mode: false, quota_mode: false, limiter: {"kind":"smooth","rate":2.5,"max_burst_seconds":1,"initial_permits":0}
`
	if got := r.Dump(); got != want {
		t.Errorf("Dump:\n%s\nwant:\n%s", got, want)
	}
	names := map[string]bool{}
	for _, tpl := range r.Templates() {
		names[tpl.Description] = true
	}
	for _, n := range []string{"mongo_cps.database_users", "mongo_cps.database_default", "messaging.message_type_marketing.to_number", "messaging.api"} {
		if !names[n] {
			t.Errorf("no template named %q: %v", n, names)
		}
	}
}

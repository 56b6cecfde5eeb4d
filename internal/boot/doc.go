// Package boot is limitd's boot file (LIMITD_CONFIG): its schema, its
// parsing and checks, applying it through core, and the Keeper that keeps it
// applied while limitd serves.
//
// The file declares limiters, templates and the gRPC front end's descriptor
// rules (domains:, in the reference Envoy rate limit server's format):
//
//	limiters:
//	  orders: {rate: 1000, burst: 1.1, max_backlog: 10s}
//	  search: {spec: "200,1.5"}
//	  login: {kind: smooth, rate: 5, max_burst_seconds: 1}
//	templates:
//	  per-user: {pattern: "user:*", order: 10, idle_ttl: 10m, limiter: {rate: 50}}
//	domains:
//	  - domain: messaging
//	    descriptors:
//	      - key: to_number
//	        rate_limit: {unit: day, requests_per_unit: 100}
//
// Each rule with a limit is a template (envoyrules.Rules.Templates) the file
// applies beside its own.
//
// Parse reads a file strictly and checks it whole before anything is
// written, so a bad file changes nothing. Its errors name the file, the line
// (from the YAML node of the field at fault: an unknown field, a value of
// the wrong type, a duplicate key, a value its type refuses, a config or
// rule that does not hold), and the field, on one line.
//
// At boot the file wins: each entry is Put (core.Service.Put), which leaves
// an equal limiter untouched and reconfigures a changed one in place,
// keeping its schedule. Then a Keeper keeps it applied: every second it asks
// which limiters and templates of the file Redis lost (core.Service.Lost)
// and applies again what is missing, after a restart without persistence of
// a single node or of any one cluster shard; and it reloads the file when
// it changes, or on SIGHUP.
//
// The Keeper also tells when Redis lost limitd's data: once written, the
// marker (core.Service.Mark, written with the file, or alone without one)
// gone means a restart without persistence or a FLUSHALL emptied Redis. It
// logs that once at ERROR, and limitd is not ready (core.Service.Ready)
// until the file is applied whole again and the marker rewritten, which it
// does at once, also when a readiness probe found the loss first.
//
// Layer: cmd → boot → grpcapi → core. boot applies through core only.
package boot

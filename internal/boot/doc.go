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
// Each rule with a limit is a template the file applies beside its own.
//
// Parse checks a file whole before anything is written, so a bad file
// changes nothing; its errors name the file, the line and the field.
//
// At boot the file wins: each entry is Put, which leaves an equal limiter
// untouched and reconfigures a changed one in place, keeping its schedule.
// Then a Keeper keeps it applied, applying again what Redis lost and
// reloading the file when it changes.
//
// Layer: cmd → boot → grpcapi → core. boot applies through core only.
package boot

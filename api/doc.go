// Package api is limitd's HTTP API: an echo v4 handler over a core.Service.
//
// New returns one Handler (an http.Handler) serving limitd's HTTP contract:
// the limiters and templates under /v1 (create, read, acquire, grant,
// charge, reset, leases and capacity), the event stream and history behind
// the dashboard (/ui/), and /healthz, /readyz, /metrics and /openapi.yaml.
// api/openapi.yaml describes every route, body and status; the tests
// validate every request and response they make against it. Every GET route
// answers HEAD as well.
//
// Every error is an RFC 9457 application/problem+json body (problem.go):
// bad input is a 400 naming the field at fault, changes nothing in Redis and
// never gets a 5xx; a Redis that cannot serve is a 503 whose detail names the
// condition; a panic is recovered into a logged 500. A problem repeats at
// most 64 characters of any input.
//
// The event streams of one Handler share one sampler (eventHub). Routes that
// need no token are kept from pages of other sites (untokened). Metrics never
// carry the name of a template instance, so per-key limiters cannot blow up
// the number of series.
//
// Layer: api is a front end over core (cmd → api → core → store → limiter).
// A handler decodes the request (wire bodies, strict JSON), calls one
// core.Service operation and encodes its result or maps its error to a
// problem; the rules live in core. api imports core, wire and limiter, never
// store.
package api

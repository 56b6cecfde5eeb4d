// Package api is limitd's HTTP API: an echo v4 handler over a store.Store.
//
// New returns one http.Handler serving the contract of shared/API.md:
//
//	PUT|GET|PATCH|DELETE /v1/limiters/{name}   create, read, reconfigure, delete
//	GET  /v1/limiters?cursor=&limit=           list, 100 per page by default
//	POST /v1/limiters/{name}/acquire           take permits (429 when not granted)
//	GET  /v1/limiters/{name}/wait              the live state: backlog, delay, totals
//	POST /v1/limiters/{name}/reset             start a new schedule now
//	PUT|GET|DELETE /v1/templates/{id}, GET /v1/templates
//	GET  /healthz, /readyz, /metrics, /openapi.yaml
//
// api/openapi.yaml describes every route, body and status; it is served at
// /openapi.yaml and the tests validate every request and response they make
// against it, so the description cannot drift from the code.
//
// Every error is an RFC 9457 application/problem+json body: 400 bad input
// (with "field" naming the JSON field, path or query parameter at fault), 401
// a missing or wrong bearer token, 404, 405, 409 a kind change through PATCH,
// 413 a body over the limit, 415 a body that is not JSON, 503 when Redis does
// not answer or the request ran out of time. Bad input changes nothing in
// Redis and never gets a 5xx; a panic is recovered into a logged 500.
//
// Metrics never carry the name of a template instance (user:42 under the
// template user:*): decisions are counted by limiter name or template id,
// so per-key limiters cannot blow up the number of series.
package api

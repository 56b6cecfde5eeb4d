// Package api is limitd's HTTP API: an echo v4 handler over a core.Service.
//
// New returns one Handler (an http.Handler) serving limitd's HTTP contract
// (the README's "The HTTP API by example"; api/openapi.yaml below):
//
//	PUT|GET|PATCH|DELETE /v1/limiters/{name}   create, read, reconfigure, delete
//	GET  /v1/limiters?cursor=&limit=           list, 100 per page by default
//	POST /v1/limiters/{name}/acquire           take permits, or a concurrency slot (429 when not granted)
//	POST /v1/limiters/{name}/grant, /handback  permits for a client pool, and their return
//	POST /v1/limiters/{name}/charge            permits a caller's work used, taken whatever is left; a grant settled
//	GET  /v1/limiters/{name}/wait              the live state: backlog, delay, totals
//	POST /v1/limiters/{name}/reset             start a new schedule now
//	POST /v1/limiters/{name}/release, /renew   end or extend a concurrency lease
//	POST /v1/limiters/{name}/capacity          a share client asks for capacity (Doorman)
//	DELETE /v1/limiters/{name}/capacity/{client_id}   and gives it back
//	PUT|GET|DELETE /v1/templates/{id}, GET /v1/templates
//	GET  /v1/events?limiters=&interval=        Server-Sent Events: status, states with their signals, config changes
//	GET  /v1/history?limiters=a,b              each limiter's signals over the last 15 minutes
//	GET  /ui/                                  the dashboard, over /v1/events and /v1/history
//	GET  /                                     redirects to /ui/
//	GET  /healthz, /readyz, /metrics, /openapi.yaml
//
// Every GET route answers HEAD as well. /readyz is 200 only while every Redis
// master accepts a write (store.Ready) and Redis has not lost limitd's data
// since it was last marked (core.Service.Ready); /metrics needs
// Options.MetricsToken when one is set.
//
// api/openapi.yaml describes every route, body and status; it is served at
// /openapi.yaml and the tests validate every request and response they make
// against it, so the description cannot drift from the code.
//
// Every error is an RFC 9457 application/problem+json body: 400 bad input
// (with "field" naming the JSON field, path or query parameter at fault), 401
// a missing or wrong bearer token, 403 a write from a browser page of another
// origin, 404, 405, 409 a kind change through PATCH or a call the limiter's
// kind does not take (acquire on a share limiter), 408 a body that did not
// arrive within Options.BodyTimeout (or the server's shorter ReadTimeout),
// 413 a body over the limit, 415 a body that is not JSON, 421 a Host that is
// not a loopback name on a loopback address, 503 when Redis cannot serve
// (the detail names the condition: READONLY, OOM, timeout, ...), the request
// ran out of time, or the event streams are at their cap. Bad input changes nothing in Redis and never gets a 5xx; a
// panic is recovered into a logged 500. JSON keys must match exactly, once
// per object. A problem repeats at most 64 characters of any input. A refused
// request whose body was not read closes its connection, so that net/http
// does not read up to 256 KiB of a body nobody wants, at the client's pace.
//
// The event streams of one Handler share one subscription to config
// changes and one sampling loop (eventHub): each round reads what the
// streams due then watch, each limiter once, and hands every one of them
// the same encoded sample, so a stream costs Redis nothing of its own. The
// loop runs while a stream is open; Handler.Close, called as the server
// shuts down, ends the streams and stops it. Options.MaxEventStreams caps
// the streams open (503 past it), and a stream whose client does not read
// is dropped after a bounded buffer. A stream answers its headers at once,
// then the last status (Redis ok or unavailable, a data loss, ready, the
// number of limiters), and again each time it changes.
//
// Handler.Run samples every named limiter once a second (signals.go), watched
// or not: each one's signals (granted and refused per second, utilization,
// the wait of a new caller, saturated), computed from what Redis holds, so
// every replica shows the same; their last 900 in a ring per limiter for GET
// /v1/history; the newest on each state event and in the utilization and
// wait gauges. Its owner (limitd serve) runs it in a goroutine and stops it
// by ending its context.
//
// A bearer token keeps browsers out on its own (a page cannot make a
// browser send one). Routes that need no token are kept from pages of other
// sites (untokened, origin.go): a write a browser sent from another origin
// (Sec-Fetch-Site, else Origin) is 403, a write whose body is not declared
// JSON 415, and a request that reached a loopback address under a Host that
// is not a loopback name 421 (DNS rebinding).
//
// Options.AccessLog picks the requests logged, one "http request" line each
// at INFO: none (the default), those answered with a problem, or all; the
// probes /healthz and /readyz never. Every answer carries an X-Request-Id:
// the client's when it is a short token, else a fresh one.
//
// Metrics never carry the name of a template instance (user:42 under the
// template user:*): decisions are counted by limiter name or template id,
// so per-key limiters cannot blow up the number of series. The same holds
// for capacity decisions and slot acquisitions.
//
// Layer: api is a front end over core (cmd → api → core → store → limiter).
// A handler decodes the request (wire bodies, strict JSON), calls one
// core.Service operation and encodes its result or maps its error to a
// problem; the rules (kind dispatch of acquire, blocking, slot hints, share
// requests, stateless grant handback, settling a grant, input checks) live
// in core. The
// Prometheus metrics observe core (core.Observer). api imports core, wire
// and limiter, never store.
package api

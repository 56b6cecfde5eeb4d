// Package grpcapi is limitd's front end for Envoy's rate limit protocol
// (envoy.service.ratelimit.v3.RateLimitService, with grpc.health.v1 beside
// it), over a core.Service.
//
// The server translates: package envoyrules (the descriptor rules and their
// matching) makes each descriptor a core.Counter, core.Service.Count decides
// the call (counting, shadow and quota mode, per rule and global, live
// there), and each core.Count becomes a descriptor status as the reference
// words it:
// OVER_LIMIT for a counter that refuses (core.Count.Refuses), the rule's
// current_limit, limit_remaining (0 when over) and duration_until_reset
// (a window's end, in whole seconds rounded up). Options.Counting picks the
// reference's counting (every hit counted, refused or not: the default) or
// limitd's all or nothing; the service's over-limit cache
// (core.Options.OverLimitCache) answers counters it remembers as over, and
// Server.SetRules empties it. Redis failing is codes.Unavailable (Envoy's
// failure_mode_deny decides), bad requests codes.InvalidArgument, a missing
// or wrong token codes.Unauthenticated. Decisions reach the service's
// core.Observer (the same metrics as the HTTP API's), and each rule's hits,
// over-limit, near-limit, within-limit and shadow-mode counts are
// Prometheus counters labelled by domain and rule, split as the reference
// splits them; with Options.ReferenceMetrics, also under the names the
// reference's Prometheus exporter gives them (ratelimit_service_rate_limit_*,
// labelled domain, key1, key2). Options.Headers adds the reference's
// response headers (limit, remaining, reset of the descriptor closest to its
// limit), and Options.WaitForRules answers Unavailable until the first
// rules, as the reference does before its first config.
//
// The port is bounded (limits.go): Limits are the calls a connection may
// have open, the connections, the bytes of a message and of its metadata,
// the pings a client may send, and how long a connection may sit idle or
// live (it is sent GOAWAY, its calls in flight given a grace period to
// finish); Server.ServerOptions turns them into a grpc.Server's options and
// Server.Listener bounds the connections. With a token set, a rate limit
// call without it is answered from its metadata before its stream exists
// (grpc.InTapHandle), so that it costs the server nothing; ShouldRateLimit
// checks it again. A request that does not decode (a malformed protobuf, a
// string that is not UTF-8) is codes.InvalidArgument, where gRPC would say
// codes.Internal (codec.go). Envoy keeps a few long-lived HTTP/2
// connections per worker and multiplexes its calls on them: DefaultLimits
// say why each default suits it.
//
// Layer: cmd → api|grpcapi → envoyrules → core → store → limiter. grpcapi
// imports envoyrules, core and limiter, never api, store or a Redis client.
package grpcapi

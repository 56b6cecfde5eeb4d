// Package grpcapi is limitd's front end for Envoy's rate limit protocol
// (envoy.service.ratelimit.v3.RateLimitService, with grpc.health.v1 beside
// it), over a core.Service.
//
// The server translates: package envoyrules (the descriptor rules and their
// matching) makes each descriptor a core.Counter, core.Service.Count decides
// the call (counting, shadow and quota mode, per rule and global, live
// there), and each core.Count becomes a descriptor status as the reference
// words it (Server.status). Redis failing is codes.Unavailable (Envoy's
// failure_mode_deny decides), bad requests codes.InvalidArgument, a missing
// or wrong token codes.Unauthenticated. Decisions reach the service's
// core.Observer (the same metrics as the HTTP API's); each rule's hits are
// split into the reference's per-rule counters (metrics.go), under its
// exporter's names too with Options.ReferenceMetrics.
//
// The port is bounded (limits.go): Limits bound what a flood of calls or
// connections can make the server hold, Server.ServerOptions turns them into
// a grpc.Server's options and Server.Listener bounds the connections. With a
// token set, a call without it is refused from its metadata before its
// stream exists, so that it costs the server nothing.
//
// Layer: cmd → api|grpcapi → envoyrules → core → store → limiter. grpcapi
// imports envoyrules, core and limiter, never api, store or a Redis client.
package grpcapi

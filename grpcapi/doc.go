// Package grpcapi is limitd's front end for Envoy's rate limit protocol
// (envoy.service.ratelimit.v3.RateLimitService, with grpc.health.v1 beside
// it), over a core.Service.
//
// The server translates: package envoyrules makes each descriptor a
// core.Counter, core.Service.Count decides the call, and each core.Count
// becomes a descriptor status as the reference words it. Redis failing is
// codes.Unavailable (Envoy's failure_mode_deny decides), bad requests
// codes.InvalidArgument, a missing or wrong token codes.Unauthenticated.
// Each rule's hits are split into the reference's per-rule counters
// (metrics.go). The port is bounded (limits.go).
//
// Layer: cmd → api|grpcapi → envoyrules → core → store → limiter. grpcapi
// imports envoyrules, core and limiter, never api, store or a Redis client.
package grpcapi

// Package httplimit limits HTTP requests per key (client IP, API key)
// through limitd limiter templates: Middleware for net/http, EchoMiddleware
// for echo. A refused request is answered 429 with Retry-After and an RFC
// 9457 problem body; every answer carries the RateLimit-Policy and RateLimit
// fields of the IETF draft.
//
// Layer: a front end over package client (httplimit → client), echo and
// net/http; nothing in limitd imports it.
//
//	c := redisclient.New(rdb)
//	h := httplimit.Middleware(c, httplimit.KeyByHeader("X-API-Key"), httplimit.WithLimiterPrefix("key:"))(mux)
//	// a template with pattern "key:*" decides each key's limit
package httplimit

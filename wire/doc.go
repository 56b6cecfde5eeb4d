// Package wire is the JSON of limitd's HTTP API, written once: the request
// and answer bodies, the RFC 9457 problem body with its media type and type
// URNs, and the encodings they use (durations as Go duration strings, times
// and delays as integer ns in "_ns" fields, a burst ratio as a number or
// "inf" through limiter.Burst).
//
// The server (api/), the client's HTTP transport (client.NewHTTP) and
// limitd bench all read and write these types, so a key cannot be spelled
// two ways; the api tests check them against api/openapi.yaml.
//
// Layer: wire sits beside store, under api/ and client/. It imports only
// limiter and the standard library: no Redis, no HTTP server.
package wire

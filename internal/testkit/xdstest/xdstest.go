// Package xdstest runs a management server as Envoy Gateway runs one for
// its rate limit service: go-control-plane's snapshot cache behind its ADS
// server, recording every request it is sent (ACKs and NACKs).
package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Server is a management server on a free loopback port, stopped when the
// test ends.
type Server struct {
	Addr  string
	cache cachev3.SnapshotCache
	mu    sync.Mutex
	reqs  []*discoveryv3.DiscoveryRequest
}

// Start starts a Server, speaking TLS with tc when it is not nil.
func Start(t testing.TB, tc *tls.Config) *Server {
	t.Helper()
	s := &Server{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.reqs = append(s.reqs, r)
		return nil
	}}
	var opts []grpc.ServerOption
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	g := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, s.cache, cb))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ln) }()
	t.Cleanup(func() { g.Stop(); cancel(); <-done })
	return s
}

// Set serves version of configs to node.
func (s *Server) Set(t testing.TB, node, version string, configs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// Requests are the requests the clients sent so far. An ACK names the
// version it accepts and has no error detail; a NACK keeps the last version
// ACKed and carries the error.
func (s *Server) Requests() []*discoveryv3.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discoveryv3.DiscoveryRequest(nil), s.reqs...)
}

// NACKs counts the NACKs received.
func (s *Server) NACKs() int {
	n := 0
	for _, r := range s.Requests() {
		if r.ErrorDetail != nil {
			n++
		}
	}
	return n
}

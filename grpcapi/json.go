package grpcapi

import (
	"io"
	"net/http"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

const maxJSONBody = 1 << 20

// JSONHandler is the reference server's POST /json over s: a
// RateLimitRequest in protobuf's JSON, answered with the
// RateLimitResponse, 200 or 429 when over the limit; a bad request is
// 400, a missing or wrong token 401 (the Authorization header is the gRPC
// call's), Redis unavailable 503.
func (s *Server) JSONHandler() http.Handler { return http.HandlerFunc(s.serveJSON) }

func (s *Server) serveJSON(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxJSONBody))
	if err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	var in rlv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &in); err != nil {
		http.Error(w, "bad request: not a RateLimitRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx := req.Context()
	if a := req.Header.Get("Authorization"); a != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", a))
	}
	resp, err := s.ShouldRateLimit(ctx, &in)
	if err != nil {
		http.Error(w, status.Convert(err).Message(), jsonStatus(status.Code(err)))
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(out)
}

func jsonStatus(c codes.Code) int {
	switch c {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.Unavailable, codes.Canceled:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

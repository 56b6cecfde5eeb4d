// Package xds receives the rate limit service's rules over xDS, as the
// reference rate limit server does with CONFIG_TYPE=GRPC_XDS_SOTW and as
// Envoy Gateway serves them: a state-of-the-world subscription, on the
// aggregated discovery service, to resources of type
// ratelimit.config.ratelimit.v3.RateLimitConfig (one domain each).
//
// Each response is the whole set of rules, compiled whole
// (boot.FromDomains): when every resource compiles, the rules are handed to
// Options.Apply and the response is ACKed; else it is NACKed with the error
// and the last good rules stay. NACKs of the same update, and reconnections,
// are paced by Backoff (docs/envoy.md says why).
//
// Layer: cmd → xds → boot → grpcapi → core.
package xds

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/limitd/limitd/envoyrules"
	"github.com/limitd/limitd/internal/boot"
)

// TypeURL is the type of the resources the client subscribes to.
const TypeURL = resource.RateLimitConfigType

// Options configure a client.
type Options struct {
	Server string // the management server, a gRPC target
	// NodeID and NodeMetadata identify the client: the server keys its
	// snapshots by node id.
	NodeID         string
	NodeMetadata   map[string]string
	Headers        map[string]string // sent as metadata on the stream
	TLS            *tls.Config       // nil: insecure
	MaxRecvMsgSize int               // bounds one response (0: gRPC's 4 MiB)
	// ConnectRetry is the first wait before dialling the server again
	// while it cannot be reached, growing to Backoff.Max (0: gRPC's 1 s).
	ConnectRetry time.Duration
	Backoff      Backoff      // paces reconnections and NACKs
	Log          *slog.Logger // connection and update lines (nil: none)
	// Apply is given each valid update's rules; the update is ACKed once it
	// returns. An error (ctx ending) drops the stream.
	Apply func(context.Context, *boot.File) error
	// Rejected is told of each update NACKed, once per version and error.
	Rejected func(error)

	wait func(context.Context, time.Duration) error // tests' timer (nil: a timer)
}

func (o *Options) sleep(ctx context.Context, d time.Duration) error {
	if o.wait != nil {
		return o.wait(ctx, d)
	}
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Backoff is how long the client waits before it connects again: Initial,
// then twice as long each time up to Max, each wait moved by up to
// ±RandomFactor of itself when Jitter is set. A stream that delivered an
// update starts over at Initial.
type Backoff struct {
	Initial, Max time.Duration
	RandomFactor float64
	Jitter       bool
}

func (b Backoff) next(attempt int) time.Duration {
	d := b.Initial
	for range attempt {
		if d >= b.Max/2 {
			d = b.Max
			break
		}
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter && b.RandomFactor > 0 {
		f := 1 + b.RandomFactor*(2*rand.Float64()-1)
		d = time.Duration(float64(d) * f)
	}
	return max(d, 0)
}

// Run subscribes until ctx ends, connecting again after every failure.
func Run(ctx context.Context, o Options) {
	log := cmp.Or(o.Log, slog.New(slog.DiscardHandler))
	for attempt := 0; ; attempt++ {
		delivered, err := subscribe(ctx, o, log)
		if ctx.Err() != nil {
			return
		}
		if delivered {
			attempt = 0
		}
		wait := o.Backoff.next(attempt)
		log.Warn("xds: the stream to the management server ended; connecting again", "server", o.Server, "err", err, "in", wait)
		if o.sleep(ctx, wait) != nil {
			return
		}
	}
}

// subscribe runs one stream until it fails, reporting whether it received
// an update.
func subscribe(ctx context.Context, o Options, log *slog.Logger) (delivered bool, err error) {
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.ConnectRetry > 0 {
		bc := backoff.DefaultConfig
		bc.BaseDelay = o.ConnectRetry
		bc.MaxDelay = max(o.Backoff.Max, o.ConnectRetry)
		dopts = append(dopts, grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc}))
	}
	if o.MaxRecvMsgSize > 0 {
		dopts = append(dopts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxRecvMsgSize)))
	}
	conn, err := grpc.NewClient(o.Server, dopts...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.New(o.Headers)))
	defer cancel() // ends the stream, and a Recv blocked on it
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx, grpc.WaitForReady(true))
	if err != nil {
		return false, err
	}
	s := &stream{st: st, node: node(o)}
	if err := s.send(""); err != nil {
		return false, err
	}
	var rejected nacks
	for {
		resp, err := st.Recv()
		if err != nil {
			return delivered, err
		}
		if !delivered {
			log.Info("xds: receiving rate limit configs", "server", o.Server, "node", o.NodeID)
		}
		delivered = true
		s.nonce = resp.Nonce
		nack := ""
		if f, err := Decode(resp.Resources); err != nil {
			wait, again := rejected.next(resp.VersionInfo, err, o.Backoff)
			if !again {
				log.Error("xds: an update is invalid: NACKed, the rules in place stay", "version", resp.VersionInfo, "err", err)
				if o.Rejected != nil {
					o.Rejected(err)
				}
			} else {
				log.Debug("xds: the invalid update came again: NACKed again after a back-off", "version", resp.VersionInfo, "in", wait)
			}
			if err := o.sleep(ctx, wait); err != nil {
				return delivered, err
			}
			nack = err.Error()
		} else {
			rejected = nacks{}
			if err := o.Apply(ctx, f); err != nil {
				return delivered, err
			}
			s.acked = resp.VersionInfo
		}
		if err := s.send(nack); err != nil {
			return delivered, err
		}
	}
}

// stream is one state-of-the-world subscription: every request names the
// version last ACKed and the nonce of the last response, and a NACK says
// why that response was refused.
type stream struct {
	st    grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	node  *corev3.Node
	acked string // the version last ACKed ("": none yet)
	nonce string // the last response's
}

// send sends the first request, an ACK (nack empty) or a NACK.
func (s *stream) send(nack string) error {
	r := &discoveryv3.DiscoveryRequest{Node: s.node, TypeUrl: TypeURL, VersionInfo: s.acked, ResponseNonce: s.nonce}
	if nack != "" {
		r.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: nack}
	}
	return s.st.Send(r)
}

// nacks paces the NACKs of one run of invalid updates: the first at once,
// each next after a back-off.
type nacks struct {
	n    int    // NACKs of the run so far
	last string // the version and error last NACKed
}

// next counts a NACK of version for err: the wait before sending it, and
// whether the same was NACKed just before (logged already).
func (r *nacks) next(version string, err error, b Backoff) (wait time.Duration, again bool) {
	key := version + "\x00" + err.Error()
	again, r.last = key == r.last, key
	if r.n++; r.n > 1 {
		wait = b.next(r.n - 2)
	}
	return wait, again
}

func node(o Options) *corev3.Node {
	fields := map[string]*structpb.Value{}
	for k, v := range o.NodeMetadata {
		fields[k] = structpb.NewStringValue(v)
	}
	return &corev3.Node{Id: o.NodeID, Metadata: &structpb.Struct{Fields: fields}}
}

// Decode converts an update's resources and compiles them whole. Errors
// name the resource and the field.
func Decode(resources []*anypb.Any) (*boot.File, error) {
	domains := make([]envoyrules.Domain, len(resources))
	names := make([]string, len(resources))
	h := sha256.New()
	for i, res := range resources {
		var c rlsconfv3.RateLimitConfig
		if err := anypb.UnmarshalTo(res, &c, proto.UnmarshalOptions{}); err != nil {
			return nil, fmt.Errorf("resources[%d]: not a %s: %w", i, TypeURL, err)
		}
		domains[i] = envoyrules.Domain{Domain: c.Domain, Descriptors: descriptors(c.Descriptors)}
		names[i] = fmt.Sprintf("RateLimitConfig %q (domain %q)", c.Name, c.Domain)
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&c)
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	f, err := boot.FromDomains("xds", hex.EncodeToString(h.Sum(nil)), domains)
	var de *boot.DomainError
	if errors.As(err, &de) {
		return nil, fmt.Errorf("%s: %s: %s", names[de.Index], de.Field, de.Rule)
	}
	return f, err
}

// descriptors are a config's descriptors in the reference's file format,
// as its config_xds.go maps them (value_to_metric and share_threshold have
// no field in RateLimitConfig: files only).
func descriptors(ds []*rlsconfv3.RateLimitDescriptor) []envoyrules.Descriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]envoyrules.Descriptor, len(ds))
	for i, d := range ds {
		out[i] = envoyrules.Descriptor{Key: d.Key, Value: d.Value, Descriptors: descriptors(d.Descriptors),
			ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric, QuotaMode: d.QuotaMode}
		if d.Metadata != nil {
			out[i].Metadata = d.Metadata.AsMap()
		}
		if p := d.RateLimit; p != nil {
			rl := &envoyrules.RateLimit{RequestsPerUnit: p.RequestsPerUnit, Unlimited: p.Unlimited, Name: p.Name}
			if p.Unit != rlsconfv3.RateLimitUnit_UNKNOWN {
				rl.Unit = strings.ToLower(p.Unit.String())
			}
			for _, r := range p.Replaces {
				rl.Replaces = append(rl.Replaces, envoyrules.Replace{Name: r.Name})
			}
			out[i].RateLimit = rl
		}
	}
	return out
}

// Package tracing starts limitd's OpenTelemetry traces: a tracer provider
// of the official SDK exporting spans over OTLP (gRPC or HTTP) in batches,
// and the propagation that continues a caller's trace (W3C trace context
// and baggage). The front ends take the provider as an option and add
// their hooks only when given one: with tracing off no provider exists and
// no hook runs, so tracing costs nothing.
//
// What is traced: a gRPC ShouldRateLimit call (otelgrpc's stats handler),
// an HTTP request of the API (a span in its middleware), and under either
// the Redis commands and pipelines it sent (go-redis' own redisotel hooks).
package tracing

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/limitd/limitd/internal/envvar"
)

// The exporters, as LIMITD_TRACING names them.
const (
	Off      = "off"       // no traces (the default)
	OTLPGRPC = "otlp-grpc" // OTLP over gRPC (port 4317 by default)
	OTLPHTTP = "otlp-http" // OTLP over HTTP, protobuf (port 4318 by default)
)

// Config says where traces go and what they say of the process.
type Config struct {
	// Exporter is Off, OTLPGRPC or OTLPHTTP ("" is Off).
	Exporter string
	// Endpoint is the collector's URL (http://host:4317, https://…); empty:
	// the exporter's own reading of the OTEL_EXPORTER_OTLP_* variables.
	Endpoint string
	// ServiceName, ServiceNamespace, ServiceInstanceID and ServiceVersion
	// are the resource's service.* attributes ("" leaves one out);
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override them.
	ServiceName, ServiceNamespace, ServiceInstanceID, ServiceVersion string
	// SamplingRate is the fraction of new traces sampled (from 0 to 1); a
	// call that carries a sampled trace is always traced (parent based).
	SamplingRate float64
}

// Provider is a started tracer provider.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// TracerProvider is what the front ends' hooks take.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Propagator reads a caller's trace from its request headers (W3C
// traceparent, tracestate and baggage).
func (p *Provider) Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Shutdown exports the spans still waiting and stops the exporter, within
// ctx.
func (p *Provider) Shutdown(ctx context.Context) error { return p.tp.Shutdown(ctx) }

// Check checks c's fields, naming the variable of each (the names limitd
// serve reads: LIMITD_TRACING, LIMITD_TRACING_SAMPLING_RATE).
func (c Config) Check() error {
	switch c.Exporter {
	case "", Off, OTLPGRPC, OTLPHTTP:
	default:
		return envvar.Errorf("LIMITD_TRACING", "must be one of off, otlp-grpc, otlp-http (got %q)", c.Exporter)
	}
	if !(c.SamplingRate >= 0 && c.SamplingRate <= 1) {
		return envvar.Errorf("LIMITD_TRACING_SAMPLING_RATE", "must be from 0 to 1 (got %v)", c.SamplingRate)
	}
	return nil
}

// Start starts the provider c asks for; nil (and no error) when tracing is
// off. It dials nothing: the exporter connects when it first sends.
func Start(ctx context.Context, c Config) (*Provider, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	var client otlptrace.Client
	switch c.Exporter {
	case "", Off:
		return nil, nil
	case OTLPGRPC:
		var opts []otlptracegrpc.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
		}
		client = otlptracegrpc.NewClient(opts...)
	case OTLPHTTP:
		var opts []otlptracehttp.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(c.Endpoint))
		}
		client = otlptracehttp.NewClient(opts...)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, envvar.Errorf("LIMITD_TRACING", "the OTLP exporter: %w", err)
	}
	var attrs []attribute.KeyValue
	for k, v := range map[attribute.Key]string{semconv.ServiceNameKey: c.ServiceName, semconv.ServiceNamespaceKey: c.ServiceNamespace,
		semconv.ServiceInstanceIDKey: c.ServiceInstanceID, semconv.ServiceVersionKey: c.ServiceVersion} {
		if v != "" {
			attrs = append(attrs, k.String(v))
		}
	}
	res, err := resource.New(ctx, resource.WithSchemaURL(semconv.SchemaURL), resource.WithTelemetrySDK(),
		resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, &envvar.Error{Name: "OTEL_RESOURCE_ATTRIBUTES", Err: err}
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SamplingRate))),
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
	)
	return &Provider{tp: tp}, nil
}

// GRPCServer is the gRPC server option that traces every call but the
// health service's (probes would drown the traces): a span per call,
// continuing the caller's trace from its metadata.
func (p *Provider) GRPCServer() grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(p.tp), otelgrpc.WithPropagators(p.Propagator()),
		otelgrpc.WithFilter(filters.Not(filters.ServiceName(healthpb.Health_ServiceDesc.ServiceName)))))
}

// InstrumentRedis adds go-redis' own tracing hooks to rdb: a span for each
// command or pipeline, the child of the span in the caller's context.
func (p *Provider) InstrumentRedis(rdb redis.UniversalClient) error {
	if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(p.tp)); err != nil {
		return fmt.Errorf("tracing Redis: %w", err)
	}
	return nil
}

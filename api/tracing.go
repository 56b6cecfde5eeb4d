package api

import (
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracing is the API's span of each request (Options.TracerProvider),
// continuing the caller's trace; Redis calls are traced under it by the
// Redis client's own hooks. nil: no tracing.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

func newTracing(tp trace.TracerProvider, prop propagation.TextMapPropagator) *tracing {
	if tp == nil {
		return nil
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &tracing{tracer: tp.Tracer("github.com/limitd/limitd/api"), prop: prop}
}

// start starts the request's span, named by method and route, in its context.
func (t *tracing) start(c echo.Context, route string) trace.Span {
	r := c.Request()
	ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := t.tracer.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route)))
	c.SetRequest(r.WithContext(ctx))
	return span
}

// end ends a request's span with its status (an error from 500 up).
func (t *tracing) end(c echo.Context, span trace.Span) {
	status := c.Response().Status
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(otelcodes.Error, "")
	}
	span.End()
}

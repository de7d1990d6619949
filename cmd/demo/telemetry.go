package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Service names of the demo's components, as they appear in a tracing
// backend.
const (
	serviceGateway  = "shedkit-demo-gateway"
	serviceUpstream = "shedkit-demo-upstream"
	serviceClient   = "shedkit-demo-client"
)

// telemetry holds the OpenTelemetry pipeline of the demo: metrics always go
// to a Prometheus endpoint (and OTLP when configured); traces are exported
// by OTLP when the standard environment variables ask for it.
type telemetry struct {
	meters  *sdkmetric.MeterProvider
	tracers map[string]*sdktrace.TracerProvider
	otlp    bool // export traces by OTLP
	keeper  *spanKeeper
	server  *http.Server
	addr    string
}

// otlpWanted reports whether a signal ("TRACES" or "METRICS") is to be
// exported by OTLP: an OTLP endpoint is configured (OTEL_EXPORTER_OTLP_ENDPOINT
// or the signal's own), and OTEL_<signal>_EXPORTER does not say otherwise
// (for instance "none": Jaeger stores traces but not metrics).
func otlpWanted(signal string) bool {
	if e := os.Getenv("OTEL_" + signal + "_EXPORTER"); e != "" && e != "otlp" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

func setupTelemetry(ctx context.Context, metricsAddr string) (*telemetry, error) {
	t := &telemetry{tracers: map[string]*sdktrace.TracerProvider{}, keeper: newSpanKeeper()}
	reg := prometheus.NewRegistry()
	prom, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithReader(prom), sdkmetric.WithResource(serviceResource(serviceGateway))}
	if otlpWanted("METRICS") {
		me, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP metric exporter: %w", err)
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me, sdkmetric.WithInterval(5*time.Second))))
	}
	t.otlp = otlpWanted("TRACES")
	t.meters = sdkmetric.NewMeterProvider(opts...)
	otel.SetTextMapPropagator(propagation.TraceContext{})

	if metricsAddr != "" {
		ln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			return nil, fmt.Errorf("-metrics-addr: %w", err)
		}
		t.addr = ln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		t.server = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = t.server.Serve(ln) }()
	}
	return t, nil
}

func serviceResource(name string) *resource.Resource {
	return resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(name), semconv.ServiceVersion("dev"))
}

// spanQueue is how many ended spans each exporter holds while the
// collector is busy; the SDK's default of 2048 is under a second of the
// demo's retry storm.
const spanQueue = 1 << 16

// tracerProvider returns the tracer provider of one component. Its spans
// go to OTLP when traces are exported; a sample of them (all of them with
// OTLP) is also kept in memory for the report's picture of one request.
func (t *telemetry) tracerProvider(ctx context.Context, service string) (trace.TracerProvider, error) {
	if tp, ok := t.tracers[service]; ok {
		return tp, nil
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(serviceResource(service)),
		sdktrace.WithSpanProcessor(t.keeper),
	}
	if t.otlp {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		// The SDK drops spans, silently, once its queue is full. A retry
		// storm ends thousands of spans a second while a busy collector
		// may take seconds per export: a dropped parent leaves its
		// children orphans in Jaeger, so the queue holds a minute of them.
		opts = append(opts, sdktrace.WithBatcher(exp,
			sdktrace.WithBatchTimeout(500*time.Millisecond), sdktrace.WithMaxQueueSize(spanQueue)))
	} else {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(traceSampleRatio))))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	t.tracers[service] = tp
	return tp, nil
}

func (t *telemetry) shutdown(ctx context.Context) error {
	var errs []error
	for _, tp := range t.tracers {
		errs = append(errs, tp.Shutdown(ctx))
	}
	errs = append(errs, t.meters.Shutdown(ctx))
	if t.server != nil {
		errs = append(errs, t.server.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

package shedotel_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/shedotel"
)

func ExampleNew() {
	reader := sdkmetric.NewManualReader() // in a service: a Prometheus or OTLP exporter
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	m, err := shedotel.New(shedotel.Config{MeterProvider: mp, Name: "gateway"})
	if err != nil {
		panic(err)
	}
	lim, err := shed.New(shed.Config{Limit: 8, Observer: m})
	if err != nil {
		panic(err)
	}
	reg, err := m.Register(lim)
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()

	p, _ := lim.TryAcquire(shed.Request{})
	defer p.Release(shed.Success)

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			if x.Name == "shedkit.admission.inflight" {
				fmt.Println(x.Name, x.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
			}
		}
	}
	// Output: shedkit.admission.inflight 1
}

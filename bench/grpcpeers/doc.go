// Package grpcpeers holds no code: its benchmarks compare shedkit's gRPC
// server interceptor (github.com/shedkit/shedkit/middleware/grpc) with
// go-concurrency-limits v1.0.0's, with its Gradient2 limit (the
// configuration of the hot-path peers of this module), in process and
// over loopback. They live here, not in middleware/grpc, so that a service
// importing the interceptors never finds go-concurrency-limits in its
// module graph; shedkit's own interceptor benchmarks (bare server, static
// and adaptive limit, rejection) stay in middleware/grpc. Run with
//
//	cd bench
//	go test -run '^$' -bench . -benchmem ./grpcpeers
//
// BenchmarkRatios gives the figures that middleware/grpc's documentation
// quotes (its "Cost" section).
package grpcpeers

// Package grpc is shedkit's load shedding for gRPC.
package grpc

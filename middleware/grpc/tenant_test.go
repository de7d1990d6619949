package grpc_test

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// TestTenant: a call carries a tenant for the fair share only when asked,
// from the trusted key metadata, the peer's address or Classify, and the
// limiter tracks none once the calls are done.
func TestTenant(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      shedgrpc.ServerConfig
		classify bool
		want     int64
	}{
		{"no tenant by default", shedgrpc.ServerConfig{KeyMetadata: "x-tenant"}, false, 0},
		{"from the key", shedgrpc.ServerConfig{KeyMetadata: "x-tenant", TenantFromKey: true}, false, 1},
		{"from the peer", shedgrpc.ServerConfig{TenantFromKey: true}, false, 1},
		{"from Classify", shedgrpc.ServerConfig{}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := newLimiter(t, shed.Config{Limit: 4})
			var seen atomic.Int64
			cfg := tc.cfg
			cfg.Limiter = lim
			if tc.classify {
				cfg.Classify = func(_ context.Context, _ shedgrpc.Call, def shedhttp.Classification) shedhttp.Classification {
					def.Tenant = "acme"
					return def
				}
			}
			s := newServer(t, cfg)
			cc := serve(t, &service{unary: func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				seen.Store(int64(lim.Snapshot().Tenants))
				return in, nil
			}}, s.ServerOptions())
			ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-tenant", "a")
			if _, err := call(ctx, cc, mBatch, "hi"); err != nil {
				t.Fatal(err)
			}
			if seen.Load() != tc.want {
				t.Errorf("%d tenants tracked while serving, want %d", seen.Load(), tc.want)
			}
			if n := lim.Snapshot().Tenants; n != 0 {
				t.Errorf("%d tenants tracked afterwards", n)
			}
		})
	}
}

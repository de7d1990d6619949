package shedredis

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// TestMiddlewareSeesFallback: through the shedkit middleware, the store
// charges the request's cost (RateLimitCost) and the request's span says
// that the decision fell back, with its cause, when Redis is unreachable.
func TestMiddlewareSeesFallback(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	store, err := NewStore(Config{Client: c, Replicas: 1, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := shed.New(shed.Config{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	mw, err := nethttp.New(nethttp.Config{
		Options: shedhttp.Options{
			Limiter: lim, KeyHeader: "X-Tenant", KeyStore: store, RateLimitCost: true,
			RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 1e-3, Burst: 6}},
		},
		Classify: func(r *http.Request, def shedhttp.Classification) shedhttp.Classification {
			def.Cost, _ = strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
			return def
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i, want := range []int{200, 200, 429} {
		ctx, span := tp.Tracer("test").Start(context.Background(), "req"+strconv.Itoa(i))
		req := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
		req.Header.Set("X-Tenant", "acme")
		req.Header.Set("X-Cost", "3")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		span.End()
		if w.Code != want {
			t.Fatalf("request %d of cost 3 on a burst of 6: status %d, want %d", i+1, w.Code, want)
		}
	}
	for _, s := range rec.Ended() {
		var fell, cause bool
		for _, kv := range s.Attributes() {
			fell = fell || (string(kv.Key) == AttrFallback && kv.Value.AsBool())
			cause = cause || (kv.Key == AttrCause && kv.Value.AsString() != "")
		}
		if !fell || !cause {
			t.Errorf("span %s: %v, want %s=true and a cause", s.Name(), s.Attributes(), AttrFallback)
		}
	}
}

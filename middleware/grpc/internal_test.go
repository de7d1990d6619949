package grpc

import (
	"fmt"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/shedkit/shedkit/retrybudget"
)

func TestPushbackMD(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-1, "-1"}, {time.Nanosecond, "1"}, {150 * time.Millisecond, "150"}, {300 * time.Millisecond, "300"},
		{1234567 * time.Microsecond, "1235"}, {10 * time.Second, "10000"}, {30 * time.Second, "30000"},
	} {
		if got := pushbackMD(tc.d)[PushbackKey]; len(got) != 1 || got[0] != tc.want {
			t.Errorf("%v: %v, want %s", tc.d, got, tc.want)
		}
	}
	// The cached trailers stay as they were (gRPC copies them).
	for i, md := range pushbackCache {
		want := fmt.Sprint(i * 100)
		if i == 0 {
			want = "-1"
		}
		if v := md[PushbackKey]; len(v) != 1 || v[0] != want {
			t.Fatalf("cache[%d] = %v", i, v)
		}
	}
}

func TestParsePushback(t *testing.T) {
	for _, tc := range []struct {
		v    []string
		kind pushbackKind
		d    time.Duration
	}{
		{nil, pushbackNone, 0},
		{[]string{"0"}, pushbackWait, 0},
		{[]string{"250"}, pushbackWait, 250 * time.Millisecond},
		{[]string{"-1"}, pushbackStop, 0},
		{[]string{"1.5"}, pushbackStop, 0},
		{[]string{""}, pushbackStop, 0},
		{[]string{"1", "2"}, pushbackStop, 0},
		{[]string{"99999999999999999"}, pushbackWait, retrybudget.MaxParsedRetryAfter},
	} {
		md := metadata.MD{}
		if tc.v != nil {
			md[PushbackKey] = tc.v
		}
		if k, d := parsePushback(md); k != tc.kind || d != tc.d {
			t.Errorf("%q: %v %v, want %v %v", tc.v, k, d, tc.kind, tc.d)
		}
	}
}

func TestTargetAttrs(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"127.0.0.1:50051", "127.0.0.1 50051"},
		{"dns:///api.example.com:443", "api.example.com 443"},
		{"passthrough:///[::1]:8080", "::1 8080"},
		{"localhost:8080", "localhost 8080"},
		{"unix:///tmp/sock", "/tmp/sock"},
		{"api.example.com", "api.example.com"},
	} {
		var got string
		for i, kv := range targetAttrs(tc.target) {
			if i > 0 {
				got += " "
			}
			got += kv.Value.String()
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.target, got, tc.want)
		}
	}
}

// TestTargetsBounded: the map never holds more than MaxHosts targets, and
// evicts a fresh breaker before one that counted failures.
func TestTargetsBounded(t *testing.T) {
	tg, err := newTargets(retrybudget.BreakerConfig{MaxHosts: 3}, func(gobreaker.State) {})
	if err != nil {
		t.Fatal(err)
	}
	bad := tg.get("bad")
	done, _ := bad.br.Allow()
	done(errAttemptFailed)
	for i := range 100 {
		tg.get(fmt.Sprint("t", i))
		if tg.n > 3 {
			t.Fatalf("%d targets, want at most 3", tg.n)
		}
	}
	if _, ok := tg.m.Load("bad"); !ok {
		t.Fatal("the target with a failure was evicted before fresh ones")
	}
}

func TestAddrKey(t *testing.T) {
	for _, tc := range []struct{ host, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"64:ff9b::c000:201", "192.0.2.1"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"@", "@"},
	} {
		if got := addrKey(tc.host, 64); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.host, got, tc.want)
		}
	}
}

// TestHTTPStatus: a recording holds a call's code as the HTTP status
// google.rpc.Code maps it to; every code has one, unknown codes 500.
func TestHTTPStatus(t *testing.T) {
	for _, tc := range []struct {
		c    codes.Code
		want int
	}{
		{codes.OK, 200}, {codes.Canceled, 499}, {codes.Unknown, 500}, {codes.InvalidArgument, 400},
		{codes.DeadlineExceeded, 504}, {codes.NotFound, 404}, {codes.AlreadyExists, 409}, {codes.PermissionDenied, 403},
		{codes.ResourceExhausted, 429}, {codes.FailedPrecondition, 400}, {codes.Aborted, 409}, {codes.OutOfRange, 400},
		{codes.Unimplemented, 501}, {codes.Internal, 500}, {codes.Unavailable, 503}, {codes.DataLoss, 500},
		{codes.Unauthenticated, 401}, {17, 500}, {1 << 31, 500},
	} {
		if got := httpStatus(tc.c); got != tc.want {
			t.Errorf("%v: %d, want %d", tc.c, got, tc.want)
		}
	}
}

// TestMethodOriginalNoAlloc: a short valid name, what every well-behaved
// caller sends, goes into rpc.method_original without allocation.
func TestMethodOriginalNoAlloc(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = methodOriginal("pkg.Service/Method") }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

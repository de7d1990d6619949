package grpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

func newServer(t testing.TB, cfg shedgrpc.ServerConfig) *shedgrpc.Server {
	t.Helper()
	s, err := shedgrpc.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestServerConfigErrors(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
	for _, tc := range []struct {
		cfg   shedgrpc.ServerConfig
		field string
	}{
		{shedgrpc.ServerConfig{}, "Limiter"},
		{shedgrpc.ServerConfig{Limiter: lim, DefaultClass: "nope"}, "DefaultClass"},
		{shedgrpc.ServerConfig{Limiter: lim, Methods: map[string]string{"pkg.Svc/M": "batch"}}, `Methods["pkg.Svc/M"]`},
		{shedgrpc.ServerConfig{Limiter: lim, Methods: map[string]string{"/pkg.Svc/": "nope"}}, `Methods["/pkg.Svc/"]`},
		{shedgrpc.ServerConfig{Limiter: lim, ClassMetadata: "x class"}, "ClassMetadata"},
		{shedgrpc.ServerConfig{Limiter: lim, KeyMetadata: "grpc-key"}, "KeyMetadata"},
		{shedgrpc.ServerConfig{Limiter: lim, KeyMetadata: "key-bin"}, "KeyMetadata"},
		{shedgrpc.ServerConfig{Limiter: lim, IPv6KeyPrefix: 129}, "IPv6KeyPrefix"},
		{shedgrpc.ServerConfig{Limiter: lim, RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 0, Burst: 1}}}, `RateLimits["batch"]`},
		{shedgrpc.ServerConfig{Limiter: lim, RateLimits: map[string]shedhttp.RateLimit{"x": {Rate: 1, Burst: 1}}}, `RateLimits["x"]`},
		{shedgrpc.ServerConfig{Limiter: lim, SkipMethods: []string{"Health"}}, "SkipMethods[0]"},
		{shedgrpc.ServerConfig{Limiter: lim, PerMessageStreams: []string{mChat, "Chat"}}, "PerMessageStreams[1]"},
	} {
		_, err := shedgrpc.NewServer(tc.cfg)
		if !errors.Is(err, shedgrpc.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%+v: got %v, want an ErrInvalidConfig naming %s", tc.cfg, err, tc.field)
		}
	}
}

// classEcho answers with the class of the call's permit.
func classEcho(lim *shed.Limiter) *service {
	return &service{unary: func(ctx context.Context, _ string, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		p := shedgrpc.Permit(ctx)
		if p == nil {
			return wrapperspb.String("none"), nil
		}
		return wrapperspb.String(lim.ClassName(p.Class())), nil
	}}
}

// TestClassifyTrustedMetadata checks that the class comes from the method
// and that a client's class metadata is ignored unless configured as
// trusted, and then only with exactly one value.
func TestClassifyTrustedMetadata(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 10, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
	methods := map[string]string{mInteract: "interactive", "/" + svcName + "/": "batch"}
	untrusted := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Methods: methods})
	trusted := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Methods: methods, ClassMetadata: "X-Shed-Class"})
	ccU := serve(t, classEcho(lim), untrusted.ServerOptions())
	ccT := serve(t, classEcho(lim), trusted.ServerOptions())
	ctx := testCtx(t)
	one := metadata.AppendToOutgoingContext(ctx, "x-shed-class", "interactive")
	two := metadata.AppendToOutgoingContext(one, "x-shed-class", "interactive")
	for _, tc := range []struct {
		name   string
		cc     *grpc.ClientConn
		ctx    context.Context
		method string
		want   string
	}{
		{"exact method", ccU, ctx, mInteract, "interactive"},
		{"service prefix", ccU, ctx, mBatch, "batch"},
		{"untrusted metadata ignored", ccU, one, mBatch, "batch"},
		{"trusted metadata", ccT, one, mBatch, "interactive"},
		{"repeated metadata ignored", ccT, two, mBatch, "batch"},
	} {
		got, err := call(tc.ctx, tc.cc, tc.method, "")
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	if n := lim.InFlight(); n != 0 {
		t.Fatalf("in flight %d after the calls", n)
	}
}

func TestSkipMethods(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 1})
	held, _ := lim.TryAcquire(shed.Request{})
	defer held.Release(shed.Ignored)
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, SkipMethods: []string{mHealth}})
	cc := serve(t, classEcho(lim), s.ServerOptions())
	if got, err := call(testCtx(t), cc, mHealth, ""); err != nil || got != "none" {
		t.Fatalf("skipped method: %q, %v", got, err)
	}
	if _, err := call(testCtx(t), cc, mBatch, ""); status.Code(err) != codes.Unavailable {
		t.Fatalf("limited method: %v", err)
	}
}

// pushbackOf returns the pushback trailer of a finished call.
func pushbackOf(md metadata.MD) string {
	if v := md.Get(shedgrpc.PushbackKey); len(v) == 1 {
		return v[0]
	}
	return fmt.Sprint(md.Get(shedgrpc.PushbackKey))
}

// TestRejectionStatus checks the code, message and pushback trailer of
// each kind of rejection.
func TestRejectionStatus(t *testing.T) {
	full := newLimiter(t, shed.Config{Limit: 1, RetryAfterMin: 300 * time.Millisecond})
	held, _ := full.TryAcquire(shed.Request{})
	defer held.Release(shed.Ignored)
	costly := newLimiter(t, shed.Config{Limit: 10, MaxCost: 100})
	cost := func(_ context.Context, _ shedgrpc.Call, def shedhttp.Classification) shedhttp.Classification {
		def.Cost = 1000
		return def
	}
	clock := func() time.Time { return time.Unix(1000, 0) } // the bucket never refills
	for _, tc := range []struct {
		name     string
		cfg      shedgrpc.ServerConfig
		code     codes.Code
		msg      string
		pushback string
	}{
		{"shed", shedgrpc.ServerConfig{Limiter: full}, codes.Unavailable, shedgrpc.MsgOverloaded, "300"},
		{"shed no retry", shedgrpc.ServerConfig{Limiter: full, NoRetryPushback: true}, codes.Unavailable, shedgrpc.MsgOverloaded, "-1"},
		{"cost too large", shedgrpc.ServerConfig{Limiter: costly, Classify: cost}, codes.ResourceExhausted, shedgrpc.MsgTooLarge, "-1"},
		{"rate limited", shedgrpc.ServerConfig{Limiter: costly, Clock: clock,
			RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 0.5, Burst: 1}}}, codes.ResourceExhausted, shedgrpc.MsgRateLimited, "2000"},
		{"bad class", shedgrpc.ServerConfig{Limiter: costly, Classify: func(_ context.Context, _ shedgrpc.Call, def shedhttp.Classification) shedhttp.Classification {
			def.Class = 9
			return def
		}}, codes.Internal, shedgrpc.MsgInternal, "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := serve(t, &service{}, newServer(t, tc.cfg).ServerOptions())
			ctx := testCtx(t)
			if tc.code == codes.ResourceExhausted && tc.msg == shedgrpc.MsgRateLimited {
				if _, err := call(ctx, cc, mBatch, ""); err != nil { // takes the one token
					t.Fatal(err)
				}
			}
			var tr metadata.MD
			_, err := call(ctx, cc, mBatch, "", grpc.Trailer(&tr))
			st, _ := status.FromError(err)
			if st.Code() != tc.code || st.Message() != tc.msg || pushbackOf(tr) != tc.pushback {
				t.Fatalf("got %v %q pushback %s; want %v %q %s", st.Code(), st.Message(), pushbackOf(tr), tc.code, tc.msg, tc.pushback)
			}
			// The same over a stream: the trailer comes with the status.
			cs, err := cc.NewStream(ctx, chatDesc, mChat)
			if err != nil {
				t.Fatal(err)
			}
			err = cs.RecvMsg(new(wrapperspb.StringValue))
			if status.Code(err) != tc.code || pushbackOf(cs.Trailer()) != tc.pushback {
				t.Fatalf("stream: got %v pushback %s", err, pushbackOf(cs.Trailer()))
			}
		})
	}
	if n := costly.InFlight(); n != 0 {
		t.Fatalf("in flight %d", n)
	}
}

// recoverUnary turns a handler's panic into Internal, as recovery
// middleware does; it sits outside the shedding interceptor.
func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Error(codes.Internal, "panic")
		}
	}()
	return h(ctx, req)
}

func recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Error(codes.Internal, "panic")
		}
	}()
	return h(srv, ss)
}

// TestPanicReleasesPermit: a handler that panics releases its permit
// (Ignored: a bug is not an overload signal) before the panic reaches the
// recovery interceptor, for unary calls and streams.
func TestPanicReleasesPermit(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 1})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim})
	svc := &service{
		unary: func(context.Context, string, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			panic("boom")
		},
		stream: func(string, grpc.ServerStream) error { panic("boom") },
	}
	cc := serve(t, svc, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recoverUnary, s.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(recoverStream, s.StreamInterceptor()),
	})
	ctx := testCtx(t)
	for i := range 3 { // the limit is 1: a leaked permit would reject the next call
		if _, err := call(ctx, cc, mBatch, ""); status.Code(err) != codes.Internal {
			t.Fatalf("call %d: %v", i, err)
		}
		cs, err := cc.NewStream(ctx, chatDesc, mChat)
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.Internal {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	snap := lim.Snapshot()
	if snap.InFlight != 0 || snap.Classes[0].Released[shed.Ignored] != 6 {
		t.Fatalf("in flight %d, released %v; want 0 and 6 ignored", snap.InFlight, snap.Classes[0].Released)
	}
}

// TestStreamCancelReleasesPermit: a stream holds one permit for its life,
// and a client that cancels it releases the permit (Ignored).
func TestStreamCancelReleasesPermit(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 1})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim})
	var msgs atomic.Int64
	cc := serve(t, &service{stream: func(_ string, ss grpc.ServerStream) error {
		for {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			msgs.Add(1)
			if shedgrpc.Permit(ss.Context()) == nil {
				return status.Error(codes.Internal, "no permit in the stream's context")
			}
			if err := ss.SendMsg(in); err != nil {
				return err
			}
		}
	}}, s.ServerOptions())
	ctx, cancel := context.WithCancel(testCtx(t))
	cs, err := cc.NewStream(ctx, chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cs.SendMsg(wrapperspb.String("hi")); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatal(i, err)
		}
		if n := lim.InFlight(); n != 1 {
			t.Fatalf("message %d: in flight %d, want the stream's one permit", i, n)
		}
	}
	// A second stream is shed while the first holds the only permit.
	cs2, err := cc.NewStream(testCtx(t), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs2.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.Unavailable {
		t.Fatalf("second stream: %v", err)
	}
	cancel()
	waitFor(t, "the cancelled stream's permit", func() bool { return lim.InFlight() == 0 })
	snap := lim.Snapshot().Classes[0]
	if snap.Released[shed.Ignored] != 1 || snap.Released[shed.Success]+snap.Released[shed.Dropped] != 0 {
		t.Fatalf("released %v, want one Ignored", snap.Released)
	}
}

func TestUnaryOutcomes(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 10})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim})
	cc := serve(t, &service{unary: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		switch in.GetValue() {
		case "unavailable":
			return nil, status.Error(codes.Unavailable, "upstream down")
		case "notfound":
			return nil, status.Error(codes.NotFound, "no such thing")
		case "ctx-deadline":
			<-ctx.Done()
			return nil, ctx.Err()
		case "early":
			shedgrpc.Permit(ctx).Release(shed.Success)
		}
		return in, nil
	}}, s.ServerOptions())
	for _, tc := range []struct {
		msg  string
		want shed.Outcome
	}{
		{"ok", shed.Success}, {"unavailable", shed.Dropped}, {"notfound", shed.Ignored},
		{"ctx-deadline", shed.Dropped}, {"early", shed.Success},
	} {
		before := lim.Snapshot().Classes[0].Released
		ctx := testCtx(t)
		if tc.msg == "ctx-deadline" {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
		}
		_, _ = call(ctx, cc, mBatch, tc.msg)
		waitFor(t, "the release", func() bool { return lim.InFlight() == 0 })
		after := lim.Snapshot().Classes[0].Released
		if after[tc.want] != before[tc.want]+1 {
			t.Errorf("%s: released %v -> %v, want one more %v", tc.msg, before, after, tc.want)
		}
	}
}

func TestDefaultOutcome(t *testing.T) {
	unary := shedgrpc.Call{FullMethod: mBatch}
	bidi := shedgrpc.Call{FullMethod: mChat, Stream: true, ClientStream: true, ServerStream: true}
	for _, tc := range []struct {
		call shedgrpc.Call
		err  error
		want shed.Outcome
	}{
		{unary, nil, shed.Success},
		{bidi, nil, shed.Ignored},
		{unary, status.Error(codes.Unavailable, ""), shed.Dropped},
		{bidi, status.Error(codes.Unavailable, ""), shed.Dropped},
		{unary, status.Error(codes.DeadlineExceeded, ""), shed.Dropped},
		{unary, context.DeadlineExceeded, shed.Dropped},
		{unary, context.Canceled, shed.Ignored},
		{unary, status.Error(codes.Internal, ""), shed.Ignored},
		{unary, status.Error(codes.ResourceExhausted, ""), shed.Ignored},
		{unary, errors.New("plain"), shed.Ignored},
	} {
		if got := shedgrpc.DefaultOutcome(tc.call, tc.err); got != tc.want {
			t.Errorf("%+v, %v: %v, want %v", tc.call, tc.err, got, tc.want)
		}
	}
}

// TestRateLimitPerKey: the rate limit comes before admission, per key:
// the trusted key metadata, else the peer's address.
func TestRateLimitPerKey(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 10})
	now := time.Unix(1000, 0)
	s := newServer(t, shedgrpc.ServerConfig{
		Limiter: lim, KeyMetadata: "x-tenant", Clock: func() time.Time { return now },
		RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 1, Burst: 2}},
	})
	cc := serve(t, &service{}, s.ServerOptions())
	ctx := testCtx(t)
	tenant := func(k string) context.Context { return metadata.AppendToOutgoingContext(ctx, "x-tenant", k) }
	for i, tc := range []struct {
		ctx  context.Context
		want codes.Code
	}{
		{tenant("a"), codes.OK}, {tenant("a"), codes.OK}, {tenant("a"), codes.ResourceExhausted},
		{tenant("b"), codes.OK},                                          // another key, another bucket
		{ctx, codes.OK}, {ctx, codes.OK}, {ctx, codes.ResourceExhausted}, // keyed by 127.0.0.1
	} {
		if _, err := call(tc.ctx, cc, mBatch, ""); status.Code(err) != tc.want {
			t.Fatalf("call %d: %v, want %v", i, err, tc.want)
		}
	}
	if snap := lim.Snapshot().Classes[0]; snap.Admitted != 5 {
		t.Fatalf("admitted %d: rate-limited calls must not reach the limiter", snap.Admitted)
	}
}

// TestDeadlineReachesLimiter: the call's deadline is the classification's
// deadline, and a queued class rejects at once (Unavailable, not a
// DeadlineExceeded after waiting) a call whose remaining time is shorter
// than the expected queue wait. The limiter estimates that wait from the
// latency of the work it admitted; it has no per-method service time yet,
// so a call is not rejected for the time its own method would take.
func TestDeadlineReachesLimiter(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 1, MaxSamplesPerSecond: -1,
		Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 5, MaxWait: 5 * time.Second}}})
	var seen atomic.Int64
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Classify: func(ctx context.Context, _ shedgrpc.Call, def shedhttp.Classification) shedhttp.Classification {
		if d, ok := ctx.Deadline(); ok && def.Deadline.Equal(d) {
			seen.Add(1)
		}
		return def
	}})
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	cc := serve(t, &service{unary: func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if in.GetValue() == "hold" {
			entered <- struct{}{}
			<-release
		} else {
			time.Sleep(2 * time.Second) // teaches the limiter its latency
		}
		return in, nil
	}}, s.ServerOptions())
	ctx := testCtx(t)
	if _, err := call(ctx, cc, mBatch, "learn"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := call(ctx, cc, mBatch, "hold")
		done <- err
	}()
	<-entered
	// The expected wait is the latency learned, 2 s; the call has 1 s,
	// time enough to reach the limiter however loaded the machine (with
	// 200 ms and 50 ms it sometimes arrived after its deadline: 1 run in
	// 180 under the race detector with two CPU hogs).
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var tr metadata.MD
	_, err := call(short, cc, mBatch, "short", grpc.Trailer(&tr))
	close(release)
	if status.Code(err) != codes.Unavailable || len(tr.Get(shedgrpc.PushbackKey)) != 1 {
		t.Fatalf("short deadline: %v (pushback %v), want Unavailable with pushback", err, tr.Get(shedgrpc.PushbackKey))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := lim.Snapshot().Classes[0].Rejected[shed.ReasonDeadline]; n != 1 {
		t.Fatalf("%d rejections for the deadline, want 1", n)
	}
	if seen.Load() != 3 {
		t.Fatalf("Classify saw the call's deadline in %d calls of 3", seen.Load())
	}
}

// TestInboundAttemptPropagates: the attempt metadata of a retrying shedkit
// client reaches the handler's context for retrybudget.
func TestInboundAttemptPropagates(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 10})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim})
	cc := serve(t, &service{unary: func(ctx context.Context, _ string, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return wrapperspb.String(fmt.Sprint(retrybudget.InboundAttempt(ctx))), nil
	}}, s.ServerOptions())
	ctx := metadata.AppendToOutgoingContext(testCtx(t), shedgrpc.AttemptMetadata, "2")
	if got, err := call(ctx, cc, mBatch, ""); err != nil || got != "2" {
		t.Fatalf("got %q, %v", got, err)
	}
	if got, err := call(testCtx(t), cc, mBatch, ""); err != nil || got != "0" {
		t.Fatalf("got %q, %v", got, err)
	}
}

// TestPerMessageStream: a stream admitted per message holds no permit
// while it waits for its client, holds one while the handler works on a
// message, and ends with the rejection's status and pushback when a
// message is not admitted.
func TestPerMessageStream(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 1, RetryAfterMin: 200 * time.Millisecond})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, PerMessageStreams: []string{mChat}})
	var during atomic.Int64 // the limiter's in-flight count while a message is handled
	cc := serve(t, &service{stream: func(_ string, ss grpc.ServerStream) error {
		for {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if shedgrpc.Permit(ss.Context()) == nil {
				return status.Error(codes.Internal, "no permit for the message")
			}
			during.Store(int64(lim.InFlight()))
			if err := ss.SendMsg(in); err != nil {
				return err
			}
		}
	}}, s.ServerOptions())
	ctx := testCtx(t)
	cs, err := cc.NewStream(ctx, chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cs.SendMsg(wrapperspb.String("hi")); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatal(i, err)
		}
		if during.Load() != 1 {
			t.Fatalf("message %d: in flight %d while handled, want 1", i, during.Load())
		}
		// Between messages the stream holds nothing: a unary call fits
		// under the limit of 1.
		waitFor(t, "the message's release", func() bool { return lim.InFlight() == 0 })
		if _, err := call(ctx, cc, mBatch, ""); err != nil {
			t.Fatalf("unary call between messages: %v", err)
		}
	}
	held, _ := lim.TryAcquire(shed.Request{})
	defer held.Release(shed.Ignored)
	if err := cs.SendMsg(wrapperspb.String("shed me")); err != nil {
		t.Fatal(err)
	}
	err = cs.RecvMsg(new(wrapperspb.StringValue))
	if status.Code(err) != codes.Unavailable || pushbackOf(cs.Trailer()) != "200" {
		t.Fatalf("shed message: %v, pushback %s; want Unavailable with 200", err, pushbackOf(cs.Trailer()))
	}
	if snap := lim.Snapshot().Classes[0]; snap.Released[shed.Success] != 6 {
		t.Fatalf("released %v, want 3 messages and 3 unary calls as successes", snap.Released)
	}
}

// TestUnaryCancelReleasesPermit: a unary call whose client goes away
// releases its permit as Ignored.
func TestUnaryCancelReleasesPermit(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 1})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim})
	entered := make(chan struct{})
	cc := serve(t, &service{unary: func(ctx context.Context, _ string, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}}, s.ServerOptions())
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := call(ctx, cc, mBatch, "")
		done <- err
	}()
	<-entered
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("client: %v", err)
	}
	waitFor(t, "the release", func() bool { return lim.InFlight() == 0 })
	if r := lim.Snapshot().Classes[0].Released; r[shed.Ignored] != 1 || r[shed.Success]+r[shed.Dropped] != 0 {
		t.Fatalf("released %v, want one Ignored", r)
	}
}

package grpc_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/middleware/internal/rectest"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

func twoClassLimiter(t testing.TB, limit int) *shed.Limiter {
	return newLimiter(t, shed.Config{Limit: limit, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
}

// statusOf answers a unary call with the status its message names: "ok"
// (or nothing), "unavailable", "invalid", or a panic for "panic".
var statusOf = &service{unary: func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	switch in.GetValue() {
	case "unavailable":
		return nil, status.Error(codes.Unavailable, "down")
	case "invalid":
		return nil, status.Error(codes.InvalidArgument, "bad")
	case "panic":
		panic("boom")
	}
	return in, nil
}}

// TestRecorder: over 127.0.0.1, unary calls that succeed, fail, panic or
// are rejected, and a stream, end up as records the record package reads
// back, with their class, decision, outcome, the HTTP status of their
// code and the key from KeyMetadata, under a header that names it.
func TestRecorder(t *testing.T) {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	lim := twoClassLimiter(t, 1)
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Methods: map[string]string{mInteract: "interactive"}, KeyMetadata: "x-tenant", Recorder: rec})
	cc := serve(t, statusOf, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recoverUnary, s.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(s.StreamInterceptor()),
	})
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-tenant", "acme")
	want := []struct {
		method, msg string
		code        codes.Code
		class       string
		decision    record.Decision
		outcome     shed.Outcome
		status      int
		key         uint64
	}{
		{mInteract, "ok", codes.OK, "interactive", record.Admitted, shed.Success, 200, record.KeyHash("acme")},
		{mInteract, "unavailable", codes.Unavailable, "interactive", record.Admitted, shed.Dropped, 503, record.KeyHash("acme")},
		{mBatch, "invalid", codes.InvalidArgument, "batch", record.Admitted, shed.Ignored, 400, record.KeyHash("acme")},
		{mBatch, "panic", codes.Internal, "batch", record.Admitted, shed.Ignored, 0, record.KeyHash("acme")}, // no status after a panic
		{mBatch, "held", codes.Unavailable, "batch", record.Rejected, 0, 503, record.KeyHash("acme")},
		{mChat, "", codes.OK, "batch", record.Admitted, shed.Ignored, 200, record.KeyHash("acme")}, // a client stream's time is the client's
	}
	for _, w := range want {
		switch {
		case w.msg == "held":
			held, _ := lim.TryAcquire(shed.Request{})
			_, err = call(ctx, cc, w.method, w.msg)
			held.Release(shed.Ignored)
		case w.method == mChat:
			err = chatOnce(ctx, cc)
		default:
			_, err = call(ctx, cc, w.method, w.msg)
		}
		if status.Code(err) != w.code {
			t.Fatalf("%s %q: %v, want %v", w.method, w.msg, err, w.code)
		}
	}
	waitFor(t, "every record", func() bool { return rec.Pending() >= len(want) })
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	h, reqs, last := rectest.ReadRecording(t, buf.Bytes())
	if h.KeySource != "header:X-Tenant" || strings.Join(h.Classes, ",") != "interactive,batch" {
		t.Errorf("header %+v", h)
	}
	if len(reqs) != len(want) || last == nil {
		t.Fatalf("%d records, want %d; last tick %+v\n%s", len(reqs), len(want), last, buf.Bytes())
	}
	for i, w := range want {
		r := reqs[i]
		if r.ClassName != w.class || r.Decision != w.decision || r.Status != w.status || r.Key != w.key ||
			(w.decision == record.Admitted && (r.Outcome != w.outcome || !r.Timed)) || (w.decision == record.Rejected && r.Reason != shed.ReasonLimit) {
			t.Errorf("%s %q recorded as %+v", w.method, w.msg, r)
		}
	}
	if last.Arrivals[0] != 2 || last.Arrivals[1] != 4 || last.Shed[1] != 1 || last.Done[1] != 3 || last.Limit != 1 {
		t.Errorf("last tick %+v", last)
	}
}

// chatOnce sends one message on a stream, reads the echo and closes.
func chatOnce(ctx context.Context, cc *grpc.ClientConn) error {
	cs, err := cc.NewStream(ctx, chatDesc, mChat)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(wrapperspb.String("hi")); err != nil {
		return err
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// TestRecorderPerMessage: a stream admitted per message is one record per
// message; a message that is shed is a rejection.
func TestRecorderPerMessage(t *testing.T) {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	lim := twoClassLimiter(t, 1)
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, PerMessageStreams: []string{mChat}, Recorder: rec})
	cc := serve(t, &service{}, s.ServerOptions())
	cs, err := cc.NewStream(testCtx(t), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := cs.SendMsg(wrapperspb.String("hi")); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the second message's release", func() bool { return lim.InFlight() == 0 })
	held, _ := lim.TryAcquire(shed.Request{})
	defer held.Release(shed.Ignored)
	if err := cs.SendMsg(wrapperspb.String("shed me")); err != nil {
		t.Fatal(err)
	}
	_ = cs.RecvMsg(new(wrapperspb.StringValue)) // the rejection ends the stream
	waitFor(t, "every record", func() bool { return rec.Pending() >= 3 })
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	_, reqs, _ := rectest.ReadRecording(t, buf.Bytes())
	if len(reqs) != 3 {
		t.Fatalf("%d records, want 3\n%s", len(reqs), buf.Bytes())
	}
	for i, r := range reqs[:2] {
		if r.Decision != record.Admitted || r.Outcome != shed.Success || r.Status != 200 || !r.Timed {
			t.Errorf("message %d recorded as %+v", i, r)
		}
	}
	if r := reqs[2]; r.Decision != record.Rejected || r.Reason != shed.ReasonLimit || r.Status != 503 {
		t.Errorf("shed message recorded as %+v", r)
	}
}

// TestRecorderRejections: each way a call is turned away, or gives up
// waiting, is recorded with its reason, decision and the HTTP status of
// its code.
func TestRecorderRejections(t *testing.T) {
	held := func(t *testing.T, cfg shed.Config) *shed.Limiter {
		l := newLimiter(t, cfg)
		p, _ := l.TryAcquire(shed.Request{})
		t.Cleanup(func() { p.Release(shed.Ignored) })
		return l
	}
	costly := func(_ context.Context, _ shedgrpc.Call, def shedhttp.Classification) shedhttp.Classification {
		def.Cost = 1000
		return def
	}
	for _, tc := range []struct {
		name     string
		cfg      func(t *testing.T) shedgrpc.ServerConfig
		timeout  time.Duration // > 0: the call's deadline
		cancel   time.Duration // > 0: the call's client goes away then
		decision record.Decision
		reason   shed.Reason
		status   int
	}{
		{"over the limit", func(t *testing.T) shedgrpc.ServerConfig {
			return shedgrpc.ServerConfig{Limiter: held(t, shed.Config{Limit: 1})}
		}, 0, 0, record.Rejected, shed.ReasonLimit, 503},
		{"cost too large", func(t *testing.T) shedgrpc.ServerConfig {
			return shedgrpc.ServerConfig{Limiter: newLimiter(t, shed.Config{Limit: 10, MaxCost: 100}), Classify: costly}
		}, 0, 0, record.Rejected, shed.ReasonCostTooLarge, 429},
		{"rate limited", func(t *testing.T) shedgrpc.ServerConfig {
			return shedgrpc.ServerConfig{Limiter: newLimiter(t, shed.Config{Limit: 10}),
				RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 1e-9, Burst: 1}}}
		}, 0, 0, record.Rejected, shed.ReasonRateLimited, 429},
		{"deadline too short to wait", func(t *testing.T) shedgrpc.ServerConfig {
			return shedgrpc.ServerConfig{Limiter: held(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 4, MaxWait: time.Minute}}})}
		}, 50 * time.Millisecond, 0, record.Rejected, shed.ReasonDeadline, 503},
		{"client gone while queued", func(t *testing.T) shedgrpc.ServerConfig {
			return shedgrpc.ServerConfig{Limiter: held(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 4, MaxWait: time.Minute}}})}
		}, 0, 20 * time.Millisecond, record.Cancelled, shed.ReasonNone, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
			if err != nil {
				t.Fatal(err)
			}
			cfg := tc.cfg(t)
			cfg.Recorder = rec
			s := newServer(t, cfg)
			ctx := testCtx(t)
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			if tc.cancel > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer time.AfterFunc(tc.cancel, cancel).Stop()
			}
			icp := s.UnaryInterceptor()
			for range 2 { // a rate limit lets the first through
				icp(ctx, nil, &grpc.UnaryServerInfo{FullMethod: mBatch}, func(context.Context, any) (any, error) { return nil, nil })
			}
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			_, reqs, _ := rectest.ReadRecording(t, buf.Bytes())
			if len(reqs) == 0 {
				t.Fatalf("no records\n%s", buf.Bytes())
			}
			r := reqs[len(reqs)-1]
			if r.Decision != tc.decision || r.Reason != tc.reason || r.Status != tc.status || r.Timed {
				t.Errorf("recorded as %+v, want %v %v %d", r, tc.decision, tc.reason, tc.status)
			}
		})
	}
}

// TestRecorderKeySource: the recording's header says where the
// interceptors took the keys from: KeyMetadata, named as the HTTP header
// it travels in (canonical, as the HTTP middleware names its KeyHeader),
// the peer's address when rate limits or fair shares need a key, and,
// with a Classify function, what its calls show: KeyMetadata's while it
// keeps the keys, "classify" when it replaces them; nothing when calls
// carry no key.
func TestRecorderKeySource(t *testing.T) {
	limits := map[string]shedhttp.RateLimit{"batch": {Rate: 100, Burst: 10}}
	classify := func(_ context.Context, _ shedgrpc.Call, def shedhttp.Classification) shedhttp.Classification {
		return def
	}
	replace := func(_ context.Context, _ shedgrpc.Call, def shedhttp.Classification) shedhttp.Classification {
		def.Key = "tenant-7"
		return def
	}
	for _, c := range []struct {
		name string
		cfg  shedgrpc.ServerConfig
		want string
	}{
		{"no key", shedgrpc.ServerConfig{}, ""},
		{"key metadata", shedgrpc.ServerConfig{KeyMetadata: "x-tenant"}, "header:X-Tenant"},
		{"key metadata, upper case", shedgrpc.ServerConfig{KeyMetadata: "X-TENANT"}, "header:X-Tenant"},
		{"key metadata, rate limited", shedgrpc.ServerConfig{KeyMetadata: "x-api.key", RateLimits: limits}, "header:X-Api.key"},
		{"address, rate limited", shedgrpc.ServerConfig{RateLimits: limits}, "addr"},
		{"address, fair shares", shedgrpc.ServerConfig{TenantFromKey: true}, "addr"},
		{"classify keeps the metadata's", shedgrpc.ServerConfig{KeyMetadata: "x-tenant", Classify: classify}, "header:X-Tenant"},
		{"classify keeps the address", shedgrpc.ServerConfig{Classify: classify}, "addr"},
		{"classify replaces", shedgrpc.ServerConfig{KeyMetadata: "x-tenant", Classify: replace}, "classify"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
			if err != nil {
				t.Fatal(err)
			}
			cfg := c.cfg
			cfg.Limiter, cfg.Recorder = twoClassLimiter(t, 10), rec
			icp := newServer(t, cfg).UnaryInterceptor()
			icp(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: mBatch}, func(context.Context, any) (any, error) { return nil, nil })
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			if h, _, _ := rectest.ReadRecording(t, buf.Bytes()); h.KeySource != c.want {
				t.Errorf("KeySource %q, want %q", h.KeySource, c.want)
			}
		})
	}
	// A key whose name a recording's header cannot hold: an error naming
	// KeyMetadata, only with a recorder.
	rec, err := record.New(record.Config{Writer: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Stop()
	long := shedgrpc.ServerConfig{Limiter: twoClassLimiter(t, 1), KeyMetadata: "x-" + strings.Repeat("t", record.MaxKeySourceBytes)}
	if _, err := shedgrpc.NewServer(long); err != nil {
		t.Fatalf("without a recorder: %v", err)
	}
	long.Recorder = rec
	if _, err := shedgrpc.NewServer(long); !errors.Is(err, shedgrpc.ErrInvalidConfig) || !strings.Contains(err.Error(), "KeyMetadata:") {
		t.Errorf("with a recorder: %v, want an ErrInvalidConfig naming KeyMetadata", err)
	}
}

// TestRecorderUnsampled: a call the recorder does not sample reads no
// clock (ServerConfig.Clock, the recorder's), and is counted all the same.
func TestRecorderUnsampled(t *testing.T) {
	rectest.CheckUnsampled(t, func(rec *record.Recorder, clock func() time.Time) func() {
		icp := newServer(t, shedgrpc.ServerConfig{Limiter: twoClassLimiter(t, 1), Clock: clock, Recorder: rec}).UnaryInterceptor()
		return func() {
			icp(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: mBatch}, func(context.Context, any) (any, error) { return nil, nil })
		}
	})
}

package grpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shedkit/shedkit/shed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The test service is written by hand (a grpc.ServiceDesc over protobuf's
// well-known StringValue) so that the tests need no code generation.
const (
	svcName     = "shedkit.test.Echo"
	mInteract   = "/" + svcName + "/Interactive"
	mBatch      = "/" + svcName + "/Batch"
	mChat       = "/" + svcName + "/Chat"
	mHealth     = "/" + svcName + "/Health"
	streamChat  = "Chat"
	methodBatch = "Batch"
)

// service answers every unary method with unary and every stream with
// stream; nil functions echo.
type service struct {
	unary  func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	stream func(method string, ss grpc.ServerStream) error
}

func unaryHandler(method string) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, icp grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		svc := srv.(*service)
		h := func(ctx context.Context, req any) (any, error) {
			if svc.unary == nil {
				return req, nil
			}
			return svc.unary(ctx, method, req.(*wrapperspb.StringValue))
		}
		if icp == nil {
			return h(ctx, in)
		}
		return icp(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}
}

func streamHandler(method string) grpc.StreamHandler {
	return func(srv any, ss grpc.ServerStream) error {
		svc := srv.(*service)
		if svc.stream == nil {
			return echoStream(ss)
		}
		return svc.stream(method, ss)
	}
}

// echoStream sends back every message until the client closes its side.
func echoStream(ss grpc.ServerStream) error {
	for {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			return nil
		}
		if err := ss.SendMsg(in); err != nil {
			return err
		}
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: svcName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Interactive", Handler: unaryHandler(mInteract)},
		{MethodName: methodBatch, Handler: unaryHandler(mBatch)},
		{MethodName: "Health", Handler: unaryHandler(mHealth)},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: streamChat, Handler: streamHandler(mChat), ServerStreams: true, ClientStreams: true},
	},
}

var chatDesc = &grpc.StreamDesc{StreamName: streamChat, ServerStreams: true, ClientStreams: true}

// serve starts a gRPC server for svc on 127.0.0.1 and returns a client
// connection to it; both are closed when the test ends.
func serve(t testing.TB, svc *service, sopts []grpc.ServerOption, copts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(sopts...)
	srv.RegisterService(&serviceDesc, svc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	copts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, copts...)
	cc, err := grpc.NewClient(lis.Addr().String(), copts...)
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		srv.Stop()
		<-done
	})
	return cc
}

func call(ctx context.Context, cc *grpc.ClientConn, method, msg string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, method, wrapperspb.String(msg), out, opts...)
	return out.GetValue(), err
}

func newLimiter(t testing.TB, cfg shed.Config) *shed.Limiter {
	t.Helper()
	l, err := shed.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitFor polls cond until it holds or 5 s pass: a bound on a test that
// would otherwise hang, not a timing assertion.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

package grpc

import (
	"context"

	"google.golang.org/grpc"

	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if s.skipped(info.FullMethod) {
		return handler(srv, ss)
	}
	call := Call{FullMethod: info.FullMethod, Stream: true, ClientStream: info.IsClientStream, ServerStream: info.IsServerStream}
	if info.IsClientStream && s.perMessage(info.FullMethod) {
		return s.streamPerMessage(srv, ss, call, handler)
	}
	st, rej := s.admit(ss.Context(), &call)
	if st == nil {
		return s.answer(nil, ss, rej)
	}
	st.ServerStream = ss
	returned := false
	defer func() {
		if !returned {
			s.releasePanicked(st)
		}
	}()
	herr := handler(srv, st)
	returned = true
	s.finish(st, &call, herr)
	return herr
}

func (s *Server) perMessage(method string) bool {
	if s.perMsg == nil {
		return false
	}
	_, ok := s.perMsg[method]
	return ok
}

// msgStream is the handler's ServerStream of a stream admitted per
// message: its RecvMsg admits each message before returning it, and the
// message's permit (in the embedded state, so that Permit(ctx) finds it)
// is held until the handler asks for the next message or returns.
type msgStream struct {
	state
	s    *Server
	call Call
}

func (s *Server) streamPerMessage(srv any, ss grpc.ServerStream, call Call, handler grpc.StreamHandler) error {
	call.PerMessage = true
	ms := &msgStream{state: state{ctx: ss.Context(), ServerStream: ss}, s: s, call: call}
	if n := inboundAttempt(ms.ctx); n > 0 {
		ms.ctx = retrybudget.WithInboundAttempt(ms.ctx, n)
	}
	returned := false
	defer func() {
		if !returned {
			s.releasePanicked(&ms.state) // the last message's permit, if any
		}
	}()
	herr := handler(srv, ms)
	returned = true
	s.finish(&ms.state, &ms.call, herr) // the last message's permit, if any
	return herr
}

// RecvMsg ends the work on the previous message (Success: the handler
// asks for more), receives the next one and admits it. A message that is
// not admitted fails RecvMsg with the rejection's status, which the
// handler returns as it returns any receive error; its pushback goes in
// the stream's trailer.
func (ms *msgStream) RecvMsg(m any) error {
	ms.done()
	if err := ms.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	ms.call.Request = m
	p, _, rq, rej := ms.s.acquire(ms.ctx, &ms.call)
	if rej.err != nil {
		return ms.s.answer(nil, ms.ServerStream, rej)
	}
	ms.permit, ms.rq = p, rq
	return nil
}

// done ends the work on the previous message, if any: Success (Ignored
// when the handler released its permit itself), recorded as OK.
func (ms *msgStream) done() {
	actual, o := ms.permit.Cost(), shed.Ignored
	if ms.permit.Valid() {
		o = shed.Success
	}
	ms.permit.Release(shed.Success)
	ms.s.recDone(&ms.rq, &ms.permit, actual, o, nil, false)
}

// Context returns the handler's context: the stream's state, which
// carries the current message's permit.
func (ms *msgStream) Context() context.Context { return &ms.state }

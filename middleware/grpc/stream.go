package grpc

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"

	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if s.skipped(info.FullMethod) || s.holds(ss.Context()) {
		return handler(srv, ss)
	}
	call := Call{FullMethod: info.FullMethod, Stream: true, ClientStream: info.IsClientStream, ServerStream: info.IsServerStream}
	if info.IsClientStream && s.perMessage(info.FullMethod) {
		return s.streamPerMessage(srv, ss, call, handler)
	}
	st, rej := s.admit(ss.Context(), &call)
	if st == nil {
		return s.answerStream(ss, rej)
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
// is held until the handler asks for the next message or returns. gRPC
// lets one goroutine receive while another sends and returns, so the
// permit is guarded by mu, and a message admitted after the handler
// returned (over) is let go at once instead of holding its permit for
// ever.
type msgStream struct {
	state
	s    *Server
	call Call

	mu   sync.Mutex
	over bool  // the handler returned: nothing more is admitted
	shed error // the status of the last message shed, until one is admitted
}

func (s *Server) streamPerMessage(srv any, ss grpc.ServerStream, call Call, handler grpc.StreamHandler) error {
	call.PerMessage = true
	ms := &msgStream{state: state{ctx: ss.Context(), ServerStream: ss, lim: s.lim}, s: s, call: call}
	if n := inboundAttempt(ms.ctx); n > 0 {
		ms.ctx = retrybudget.WithInboundAttempt(ms.ctx, n)
	}
	returned := false
	defer func() {
		if !returned {
			ms.mu.Lock()
			defer ms.mu.Unlock()
			ms.over = true
			s.releasePanicked(&ms.state) // the last message's permit, if any
		}
	}()
	herr := handler(srv, ms)
	returned = true
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ms.over = true
	if herr == nil && ms.shed != nil {
		// The handler ended the stream on a message it was refused, as
		// on any receive error: the client must not read a success for
		// work that was not done.
		herr = ms.shed
	}
	s.finish(&ms.state, &ms.call, herr) // the last message's permit, if any
	return herr
}

// RecvMsg ends the work on the previous message (Success: the handler
// asks for more), receives the next one and admits it. A message that is
// not admitted fails RecvMsg with the rejection's status, which the
// handler returns as it returns any receive error (a handler that
// returns nil instead ends the call with that status all the same); its
// pushback goes in the stream's trailer.
func (ms *msgStream) RecvMsg(m any) error {
	ms.mu.Lock()
	ms.done()
	ms.mu.Unlock()
	if err := ms.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	call := ms.call
	call.Request = m
	p, _, rq, _, rej := ms.s.acquire(ms.ctx, &call)
	ms.mu.Lock()
	defer ms.mu.Unlock()
	switch {
	case rej.err != nil:
		ms.shed = rej.err
		return ms.s.answerStream(ms.ServerStream, rej)
	case ms.over:
		// Received after the handler returned: nobody works on it.
		p.Release(shed.Ignored)
		ms.s.recDone(&rq, &p, p.Cost(), shed.Ignored, nil, false)
		return io.EOF
	}
	ms.call.Request = m
	ms.permit, ms.rq, ms.shed = p, rq, nil
	return nil
}

// done ends the work on the previous message, if any: Success (Ignored
// when the handler released its permit itself), recorded as OK. When the
// stream's context ended, as for a call: Ignored (its client went away),
// Dropped (its deadline passed); a handler that gave up on the message
// and asks for the next one has not succeeded, and its short latency
// would pull the limit up. The caller holds mu.
func (ms *msgStream) done() {
	actual, o, cerr := ms.permit.Cost(), shed.Ignored, ms.ctx.Err()
	if ms.permit.Valid() {
		o = shed.Success
		if cerr != nil {
			o = shed.Ignored
			if pastDeadline(ms.ctx, cerr) {
				o = shed.Dropped // a message is not client-bound
			}
		}
	}
	ms.permit.Release(o)
	// Recorded with the context's code (Canceled, DeadlineExceeded) when
	// it ended: the client got no OK for it.
	ms.s.recDone(&ms.rq, &ms.permit, actual, o, cerr, false)
}

// Context returns the handler's context: the stream's state, which
// carries the current message's permit.
func (ms *msgStream) Context() context.Context { return &ms.state }

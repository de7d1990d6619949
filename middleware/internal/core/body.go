package core

import (
	"io"
	"sync/atomic"
	"time"
)

// monoEpoch anchors monoNow.
var monoEpoch = time.Now()

// monoNow is the monotonic time in nanoseconds since monoEpoch, at least
// 1 so that 0 can mean "none". It reads only the monotonic clock, which
// costs about half of time.Now.
func monoNow() int64 { return int64(time.Since(monoEpoch)) + 1 }

// clientBody wraps a request body to measure how long the handler spends
// blocked in Read: waiting for the client to send, not working. A request
// that spent its time that way says nothing about the service's capacity
// (see State.clientBound). It lives inside the State, so wrapping
// allocates nothing; each Read costs two reads of the monotonic clock.
//
// The counters are atomic because the body may be read on another
// goroutine than the one that releases the permit (a handler that stops
// waiting for a body read when its context ends).
type clientBody struct {
	rc io.ReadCloser
	// blocked is the time spent in Reads that returned; reading is when
	// the Read in progress began, 0 if none.
	blocked, reading atomic.Int64
}

func (b *clientBody) Read(p []byte) (int, error) {
	start := monoNow()
	b.reading.Store(start)
	n, err := b.rc.Read(p)
	b.blocked.Add(monoNow() - start)
	b.reading.Store(0)
	return n, err
}

func (b *clientBody) Close() error { return b.rc.Close() }

// waited returns the time blocked in Read up to now, counting a Read still
// in progress.
func (b *clientBody) waited(now int64) time.Duration {
	w := b.blocked.Load()
	if start := b.reading.Load(); start != 0 {
		w += now - start
	}
	return time.Duration(w)
}

// WatchBody returns the body the handler of st's request reads: rc,
// measured (see clientBody). Call it only for a request with a body.
func (st *State) WatchBody(rc io.ReadCloser) io.ReadCloser {
	st.body.rc = rc
	st.admitted = monoNow()
	return &st.body
}

// clientBound reports whether the handler's outcome says more about the
// client than about the service, because the handler spent its time
// blocked reading the request body. deadlinePassed tells that the request
// context's deadline passed.
//
//   - Deadline passed: the request would have met its deadline without the
//     time it waited for the client (it ended no later than that time
//     after the deadline). A slow upload behind a request timeout then
//     misses the deadline through no fault of the service, and a Dropped
//     release would cut the limit for everyone.
//   - Otherwise: at least half of the time since admission was spent
//     waiting for the client. Its latency is mostly the client's; as a
//     sample it would look like congestion.
func (st *State) clientBound(deadlinePassed bool) bool {
	if st.body.rc == nil {
		return false // no body, or not watched
	}
	now := monoNow()
	waited := st.body.waited(now)
	if waited <= 0 {
		return false
	}
	if deadlinePassed {
		dl, ok := st.Context.Deadline()
		return ok && -time.Until(dl) <= waited
	}
	return 2*waited >= time.Duration(now-st.admitted)
}

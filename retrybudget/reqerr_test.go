package retrybudget

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestTransportInvalidHeaderIsTheRequests checks that a header field the
// base transport refuses is the request's fault: net/http reports it as
// plain text before it dials, so a retry fails the same way. It must be
// sent once, spend no retry, and count against neither the breaker nor
// the throttle, which would let whoever can set a header cut the host
// off for everybody.
func TestTransportInvalidHeaderIsTheRequests(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  func(*http.Request)
	}{
		{"value", func(r *http.Request) { r.Header.Set("X-Note", "a\r\nInjected: yes") }},
		{"name", func(r *http.Request) { r.Header["Bad Name"] = []string{"v"} }},
		{"trailer", func(r *http.Request) { r.Trailer = http.Header{"X-T": {"a\x00b"}} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t, statuses(200))
			th, _ := NewThrottle(ThrottleConfig{})
			tr, _ := testTransport(t, TransportConfig{Throttle: th, MaxAttempts: 3,
				Breaker: BreakerConfig{ConsecutiveFailures: 1}})
			for range 3 {
				req := get(t, up.url())
				tt.set(req)
				_, _, rep, err := do(t, tr, req)
				if err == nil || rep.Attempts != 1 {
					t.Fatalf("err %v, report %+v: want an error after one attempt", err, rep)
				}
				if errors.Is(err, ErrCircuitOpen) {
					t.Fatalf("the breaker opened on the request's own error: %v", err)
				}
			}
			if s := th.Snapshot(); s.Requests != s.Accepts {
				t.Fatalf("throttle %+v: the request's own error counted as the backend's", s)
			}
			if status, _, _, err := do(t, tr, get(t, up.url())); err != nil || status != 200 {
				t.Fatalf("a valid request after them: status %d err %v", status, err)
			}
		})
	}
}

// FuzzForbiddenFields checks the header test against net/http itself: a
// transport whose dial always fails reports the dial error for a header
// it accepts and its own refusal for one it does not, so the two must
// agree on every name and value.
func FuzzForbiddenFields(f *testing.F) {
	for _, s := range [][2]string{{"X-A", "v"}, {"Bad Name", "v"}, {"X-A", "a\r\nb"}, {"X-A", "tab\there"},
		{"X-A", "\x7f"}, {"X-A", "caf\xc3\xa9"}, {"", "v"}, {"X:A", "v"}} {
		f.Add(s[0], s[1])
	}
	errDial := errors.New("dial refused by the test")
	base := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return nil, errDial }}
	f.Fuzz(func(t *testing.T, name, value string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:1/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = http.Header{name: {value}}
		_, err = base.RoundTrip(req)
		if ctx.Err() != nil {
			t.Fatalf("the round trip hung: %v", err)
		}
		refused := !errors.Is(err, errDial)
		if got := forbiddenFields(req.Header); got != refused {
			t.Fatalf("forbiddenFields(%q: %q) = %v, net/http: %v", name, value, got, err)
		}
	})
}

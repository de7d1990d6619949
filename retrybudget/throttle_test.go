package retrybudget

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNewThrottleValidation(t *testing.T) {
	tests := []struct {
		cfg   ThrottleConfig
		field string
	}{
		{ThrottleConfig{}, ""},
		{ThrottleConfig{K: 1}, ""},
		{ThrottleConfig{K: 0.5}, "K"},
		{ThrottleConfig{K: -2}, "K"},
		{ThrottleConfig{K: nan()}, "K"},
		{ThrottleConfig{Window: -1}, "Window"},
		{ThrottleConfig{Buckets: -1}, "Buckets"},
		{ThrottleConfig{Buckets: 2000}, "Buckets"},
		{ThrottleConfig{Window: time.Millisecond, Buckets: 2}, "Window/Buckets"},
	}
	for _, tt := range tests {
		_, err := NewThrottle(tt.cfg)
		if tt.field == "" {
			if err != nil {
				t.Errorf("%+v: %v", tt.cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "ThrottleConfig."+tt.field) {
			t.Errorf("%+v: err = %v, want one naming %s", tt.cfg, err, tt.field)
		}
	}
}

func TestThrottleProbability(t *testing.T) {
	tests := []struct {
		k                 float64
		requests, accepts int
		want              float64
	}{
		{2, 0, 0, 0},
		{2, 100, 100, 0},
		{2, 100, 50, 0},
		{2, 100, 40, 20.0 / 101},
		{2, 100, 0, 100.0 / 101},
		{1, 100, 90, 10.0 / 101},
		{3, 100, 10, 70.0 / 101},
	}
	for _, tt := range tests {
		th, err := NewThrottle(ThrottleConfig{K: tt.k})
		if err != nil {
			t.Fatal(err)
		}
		for i := range tt.requests {
			if i < tt.accepts {
				th.AcceptAt(t0)
			} else {
				th.RejectAt(t0)
			}
		}
		s := th.SnapshotAt(t0)
		if math.Abs(s.RejectProbability-tt.want) > 1e-12 || s.Requests != uint64(tt.requests) || s.Accepts != uint64(tt.accepts) {
			t.Errorf("K=%v req=%d acc=%d: snapshot %+v, want p=%v", tt.k, tt.requests, tt.accepts, s, tt.want)
		}
		if p := th.RejectProbabilityAt(t0); p != s.RejectProbability {
			t.Errorf("RejectProbabilityAt = %v, snapshot %v", p, s.RejectProbability)
		}
	}
}

func TestThrottleDecisionAndWindow(t *testing.T) {
	th, err := NewThrottle(ThrottleConfig{Window: 10 * time.Second, Buckets: 10})
	if err != nil {
		t.Fatal(err)
	}
	for range 99 {
		th.RejectAt(t0)
	}
	// 99 requests, 0 accepts: p = 99/100.
	if th.AllowAt(t0, 0.98) {
		t.Fatal("u < p must be rejected")
	}
	// 100 requests now: p = 100/101 = 0.990...
	if !th.AllowAt(t0, 0.991) {
		t.Fatal("u >= p must be allowed")
	}
	// Local rejections count as requests at once: p kept rising; the
	// allowed request counts only once its outcome is reported.
	if got := th.SnapshotAt(t0).Requests; got != 100 {
		t.Fatalf("requests = %d, want 100 (rejected ones included, the allowed one in flight not)", got)
	}
	th.RejectAt(t0)
	if got := th.SnapshotAt(t0).Requests; got != 101 {
		t.Fatalf("requests = %d after its rejection, want 101", got)
	}
	// After the window, history is gone.
	if p := th.RejectProbabilityAt(t0.Add(10 * time.Second)); p != 0 {
		t.Fatalf("p after the window = %v", p)
	}
}

// TestThrottleSeeded drives a throttle with a seeded source against a
// backend that can accept 30% of the offered load (a token bucket), and
// checks that the client settles at sending about K x accepts: with K = 2,
// about 60% of its requests, the rest being rejected locally.
func TestThrottleSeeded(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	th, err := NewThrottle(ThrottleConfig{Rand: rng.Float64})
	if err != nil {
		t.Fatal(err)
	}
	sent, tokens := 0, 0.0
	const n = 100000
	now := t0
	for range n {
		now = now.Add(time.Millisecond)
		tokens = min(tokens+0.3, 100)
		if !th.AllowAt(now, rng.Float64()) {
			continue
		}
		sent++
		if tokens >= 1 {
			tokens--
			th.AcceptAt(now)
		} else {
			th.RejectAt(now)
		}
	}
	frac := float64(sent) / n
	t.Logf("sent %.3f of the offered requests", frac)
	if frac < 0.55 || frac > 0.70 {
		t.Fatalf("sent %.3f of the requests, want about 0.6", frac)
	}
	// The wall-clock wrappers use the configured source.
	th.Allow()
	th.Accept()
	th.Reject()
}

func TestThrottleConcurrent(t *testing.T) {
	th, err := NewThrottle(ThrottleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				if th.AllowAt(t0, 0.5) {
					th.AcceptAt(t0)
				}
			}
		})
	}
	wg.Wait()
	if s := th.SnapshotAt(t0); s.Requests != 4000 || s.Accepts != 4000 {
		t.Fatalf("snapshot %+v, want 4000 requests and accepts", s)
	}
}

// TestThrottleColdBurstAdmitsHealthyBackend: a request is counted when its
// outcome is known, so requests in flight are not taken for rejections. A
// burst to a fresh throttle all goes through, even with u = 0 (rejected
// as soon as p > 0), and once accepted leaves p at 0. (Before the fix,
// AllowAt counted each request at admission: the second request of the
// burst saw p = 1/2.)
func TestThrottleColdBurstAdmitsHealthyBackend(t *testing.T) {
	th, err := NewThrottle(ThrottleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const burst = 32
	for i := range burst {
		if !th.AllowAt(t0, 0) {
			t.Fatalf("request %d of the burst rejected with %d in flight: %+v", i, i, th.SnapshotAt(t0))
		}
	}
	if s := th.SnapshotAt(t0); s.Requests != 0 || s.RejectProbability != 0 {
		t.Fatalf("in flight: snapshot %+v, want nothing counted", s)
	}
	for range burst {
		th.AcceptAt(t0)
	}
	for i := range 10 {
		if !th.AllowAt(t0, 0) {
			t.Fatalf("request %d after the burst rejected: %+v", i, th.SnapshotAt(t0))
		}
		th.AcceptAt(t0)
	}
	if s := th.SnapshotAt(t0); s.Requests != burst+10 || s.Accepts != burst+10 {
		t.Fatalf("snapshot %+v, want %d requests, all accepted", s, burst+10)
	}
}

// TestTransportThrottleConcurrentBurst: a Transport reports each attempt's
// outcome when it arrives, so concurrent requests to a healthy backend
// are never throttled while the others are in flight. The base holds
// every request until all of them have reached it; Rand 0 makes any
// p > 0 reject.
func TestTransportThrottleConcurrentBurst(t *testing.T) {
	th, err := NewThrottle(ThrottleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const burst = 16
	arrived, release := make(chan struct{}, burst), make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release) // on failure, free the requests held
		}
	}()
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		arrived <- struct{}{}
		<-release
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	tr, _ := testTransport(t, TransportConfig{Base: base, Throttle: th, Rand: func() float64 { return 0 }})
	errs := make(chan error, burst)
	for range burst {
		req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
		go func() {
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	for in := 0; in < burst; {
		select {
		case <-arrived:
			in++
		case err := <-errs:
			t.Fatalf("a request ended with %d in flight: %v (%+v)", in, err, th.Snapshot())
		}
	}
	close(release)
	for range burst {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s := th.Snapshot(); s.Requests != burst || s.Accepts != burst {
		t.Fatalf("snapshot %+v, want %d requests, all accepted", s, burst)
	}
}

package retrybudget

import (
	"math"
	"math/rand/v2"
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
			th.AllowAt(t0, 0.999999) // u close to 1 is allowed while p < 1
			if i < tt.accepts {
				th.AcceptAt(t0)
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
		th.AllowAt(t0, 0.999)
	}
	// 99 requests, 0 accepts: p = 99/100.
	if th.AllowAt(t0, 0.98) {
		t.Fatal("u < p must be rejected")
	}
	// 100 requests now: p = 100/101 = 0.990...
	if !th.AllowAt(t0, 0.991) {
		t.Fatal("u >= p must be allowed")
	}
	// Rejections count as requests: p kept rising.
	if got := th.SnapshotAt(t0).Requests; got != 101 {
		t.Fatalf("requests = %d, want 101 (rejected ones included)", got)
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

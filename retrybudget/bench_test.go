package retrybudget

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkBudget is the hot path of a retrying client: one deposit per
// logical request and one withdrawal check, from every P at once, in
// explicit time that advances 64µs every 64 operations per goroutine.
func BenchmarkBudget(b *testing.B) {
	bu, _ := NewBudget(BudgetConfig{})
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := t0.Add(time.Duration(seq.Add(1)) * time.Millisecond)
		for i := 0; pb.Next(); i++ {
			if i&63 == 0 { // moving the clock costs ~20ns: not every time
				now = now.Add(64 * time.Microsecond)
			}
			bu.DepositAt(now)
			bu.TryWithdrawAt(now)
		}
	})
}

// BenchmarkBudgetWallClock is BenchmarkBudget with the wall-clock
// wrappers: two clock reads per operation.
func BenchmarkBudgetWallClock(b *testing.B) {
	bu, _ := NewBudget(BudgetConfig{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bu.Deposit()
			bu.TryWithdraw()
		}
	})
}

// BenchmarkAtomicBaseline is the floor to compare with: one contended
// atomic add and one load.
func BenchmarkAtomicBaseline(b *testing.B) {
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Add(1)
			_ = n.Load()
		}
	})
}

func BenchmarkThrottle(b *testing.B) {
	th, _ := NewThrottle(ThrottleConfig{})
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := t0.Add(time.Duration(seq.Add(1)) * time.Millisecond)
		for i := 0; pb.Next(); i++ {
			if i&63 == 0 {
				now = now.Add(64 * time.Microsecond)
			}
			if th.AllowAt(now, 0.5) {
				th.AcceptAt(now)
			} else {
				th.RejectAt(now)
			}
		}
	})
}

func BenchmarkBudgetMapGet(b *testing.B) {
	m, _ := NewBudgetMap(BudgetConfig{}, 0)
	keys := []string{"a:80", "b:80", "c:443", "d:8080"}
	for _, k := range keys {
		m.Get(k)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m.Get(keys[i&3])
			i++
		}
	})
}

// BenchmarkTransport measures the overhead of the retrying transport on
// a loopback server that never fails, beside a bare http.Transport in the
// same run. Both use their own http.Transport with the same settings.
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	newBase := func() *http.Transport {
		return &http.Transport{MaxIdleConnsPerHost: 64}
	}
	run := func(b *testing.B, rt http.RoundTripper) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	b.Run("bare", func(b *testing.B) {
		base := newBase()
		defer base.CloseIdleConnections()
		run(b, base)
	})
	b.Run("retrybudget", func(b *testing.B) {
		base := newBase()
		defer base.CloseIdleConnections()
		bu, _ := NewBudget(BudgetConfig{})
		tr, err := NewTransport(TransportConfig{Base: base, Budget: bu})
		if err != nil {
			b.Fatal(err)
		}
		run(b, tr)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// BenchmarkTransportOverhead isolates the transport's own cost: its base
// answers 200 at once, without a network.
func BenchmarkTransportOverhead(b *testing.B) {
	ok := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/x", nil)
	run := func(b *testing.B, rt http.RoundTripper) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
			}
		})
	}
	b.Run("base", func(b *testing.B) { run(b, ok) })
	for _, c := range []struct {
		name string
		cfg  TransportConfig
	}{
		{"default", TransportConfig{}},
		{"no-breaker", TransportConfig{Breaker: BreakerConfig{Disabled: true}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			c.cfg.Base = ok
			c.cfg.Budget, _ = NewBudget(BudgetConfig{})
			tr, err := NewTransport(c.cfg)
			if err != nil {
				b.Fatal(err)
			}
			run(b, tr)
		})
	}
}

// BenchmarkTransportNewHosts sends every request to a host the transport
// has not seen, with the breaker map full: the cost of adding a host (and
// evicting one) must not grow with MaxHosts. Its base answers 200 at
// once, without a network.
func BenchmarkTransportNewHosts(b *testing.B) {
	ok := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
	for _, maxHosts := range []int{1000, 5000, 20000} {
		b.Run(fmt.Sprintf("MaxHosts=%d", maxHosts), func(b *testing.B) {
			tr, err := NewTransport(TransportConfig{Base: ok, NoBudget: true,
				Breaker: BreakerConfig{MaxHosts: maxHosts}})
			if err != nil {
				b.Fatal(err)
			}
			// Twice as many hosts as breakers: each request is a miss.
			reqs := make([]*http.Request, 2*maxHosts)
			for i := range reqs {
				reqs[i], _ = http.NewRequest(http.MethodGet, fmt.Sprintf("http://h%d.example:80/", i), nil)
			}
			for _, r := range reqs[:maxHosts] { // fill the map
				tr.RoundTrip(r)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				resp, err := tr.RoundTrip(reqs[(maxHosts+i)%len(reqs)])
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}

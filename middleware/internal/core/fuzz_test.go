package core_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/core"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// FuzzClassifyTrusted: with a trusted class header and key header (their
// names fuzzed too: New accepts them or names the field), the class is
// the header's only when it carries exactly one known class name, else the
// route's; the key is the header's only when it carries exactly one
// non-empty value. Header values arrive as net/http stores them: the
// request is parsed from the wire by http.ReadRequest.
func FuzzClassifyTrusted(f *testing.F) {
	f.Add("X-Class", "X-Tenant", "interactive", "", "acme", "", "/api/x")
	f.Add("x-class", "x-tenant", "batch", "batch", "a", "b", "/")
	f.Add("X-Class", "X-Tenant", "nope", "", "", "", "/api/bulk")
	f.Add("X_Class", "X.Tenant", "interactive", "", "t", "", "/")
	f.Add("X Class", "X-Tenant", "interactive", "", "t", "", "/") // invalid name
	f.Add("X-Class", "X-Tenant", " interactive ", "", " t ", "", "/")
	l := limiter(f)
	f.Fuzz(func(t *testing.T, classHeader, keyHeader, c1, c2, k1, k2, path string) {
		e, err := core.New(core.Config{Limiter: l, ClassHeader: classHeader, KeyHeader: keyHeader, Routes: map[string]string{"/api/": "interactive", "/api/bulk": "batch"}})
		if err != nil {
			if !errors.Is(err, shedhttp.ErrInvalidConfig) {
				t.Fatalf("New: %v", err)
			}
			return
		}
		if classHeader == "" || keyHeader == "" || http.CanonicalHeaderKey(classHeader) == http.CanonicalHeaderKey(keyHeader) {
			return
		}
		raw := "GET /x HTTP/1.1\r\nHost: h\r\n"
		add := func(name, v string) {
			if v != "" {
				raw += name + ": " + v + "\r\n"
			}
		}
		add(classHeader, c1)
		add(classHeader, c2)
		add(keyHeader, k1)
		add(keyHeader, k2)
		r, err := http.ReadRequest(bufioReader(raw + "\r\n"))
		if err != nil {
			return // not a request net/http would serve
		}
		r.URL.Path = path
		base := r.Clone(context.Background())
		base.Header = http.Header{}
		want := e.Classify(base, "")

		got := e.Classify(r, "")
		if n := len(l.Snapshot().Classes); int(got.Class) >= n {
			t.Fatalf("class %d of %d", got.Class, n)
		}
		cv := r.Header.Values(classHeader)
		if len(cv) == 1 {
			if c, ok := l.ClassByName(cv[0]); ok {
				want.Class = c
			}
		}
		kv := r.Header.Values(keyHeader)
		if len(kv) == 1 && kv[0] != "" {
			want.Key = kv[0]
		}
		if got != want {
			t.Fatalf("headers %q: %q, %q: %q: got %+v, want %+v", classHeader, cv, keyHeader, kv, got, want)
		}
	})
}

// FuzzAdmit: whatever class, cost and deadline a classifier derives from a
// request (they usually come from its headers), Admit either admits it
// (and the release returns the slot) or answers a well-formed rejection:
// 413, 429, 500 or 503, Retry-After in whole seconds on 429 and 503 only,
// the no-retry header on 429 and 503 only, and a cause.
func FuzzAdmit(f *testing.F) {
	f.Add(uint8(0), int64(0), int64(0), uint8(0), false)
	f.Add(uint8(1), int64(5), int64(-1000), uint8(4), false)
	f.Add(uint8(0), int64(11), int64(0), uint8(0), false)
	f.Add(uint8(7), int64(0), int64(0), uint8(0), false)
	f.Add(uint8(0), int64(-3), int64(0), uint8(0), false)
	f.Add(uint8(0), int64(1), int64(50), uint8(4), false)
	f.Add(uint8(1), int64(1), int64(0), uint8(0), true)
	f.Add(uint8(0), int64(1), int64(0), uint8(4), true)
	f.Fuzz(func(t *testing.T, class uint8, cost int64, deadlineMs int64, held uint8, ctxDone bool) {
		l, e := admitEngine(t)
		permits := holdBatch(l, held)
		ctx, cancel := context.WithCancel(context.Background())
		if ctxDone {
			cancel()
		}
		defer cancel()
		cl := shedhttp.Classification{Class: shed.Class(class), Cost: cost, Key: "k"}
		if deadlineMs != 0 {
			cl.Deadline = time.Now().Add(time.Duration(deadlineMs%10_000) * time.Millisecond)
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
		for range 3 { // the third request of the key is rate limited
			st, rej := e.Admit(r, cl)
			if st != nil {
				if rej != (shedhttp.Rejection{}) || !st.Permit.Valid() || core.PermitFrom(st) != &st.Permit {
					t.Fatalf("admitted with rejection %+v", rej)
				}
				e.Release(st, r, http.StatusOK)
				continue
			}
			checkRejection(t, e, rej)
		}
		for i := range permits {
			permits[i].Release(shed.Ignored)
		}
		if snap := l.Snapshot(); snap.InFlight != 0 || snap.Queued != 0 || snap.InFlightCost != 0 {
			t.Fatalf("left behind: %+v", snap)
		}
	})
}

// admitEngine is FuzzAdmit's engine over a fresh limiter of 4 (cost at
// most 10): interactive may queue for 2 ms, batch is rate limited per key
// to a burst of 2 (the clock stands still: no refill).
func admitEngine(t *testing.T) (*shed.Limiter, *core.Engine) {
	t.Helper()
	l, err := shed.New(shed.Config{
		Limit:   4,
		MaxCost: 10,
		Classes: []shed.ClassConfig{
			{Name: "interactive", Protected: 0.5, QueueDepth: 1, MaxWait: 2 * time.Millisecond},
			{Name: "batch"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e, err := core.New(core.Config{
		Limiter:    l,
		RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 1, Burst: 2}},
		Clock:      func() time.Time { return clock },
	})
	if err != nil {
		t.Fatal(err)
	}
	return l, e
}

// holdBatch takes up to held%5 batch permits of l (fewer if l refuses).
func holdBatch(l *shed.Limiter, held uint8) []shed.Permit {
	var permits []shed.Permit
	for range held % 5 {
		if p, err := l.TryAcquire(shed.Request{Class: 1}); err == nil {
			permits = append(permits, p)
		}
	}
	return permits
}

// checkRejection checks that rej, and the headers e sets for it, are a
// well-formed rejection (see FuzzAdmit).
func checkRejection(t *testing.T, e *core.Engine, rej shedhttp.Rejection) {
	t.Helper()
	if rej.Status == 0 {
		// Nothing written would reach a client that is still
		// there as an empty 200.
		t.Fatalf("a rejection without a status: %+v", rej)
	}
	if rej.Err == nil {
		t.Fatalf("rejection without a cause: %+v", rej)
	}
	h := http.Header{}
	e.SetRejectHeaders(h, rej)
	shedding := rej.Status == 429 || rej.Status == 503
	switch rej.Status {
	case 429, 503:
		secs, err := strconv.Atoi(h.Get("Retry-After"))
		if err != nil || secs < 1 || time.Duration(secs)*time.Second != rej.RetryAfter {
			t.Fatalf("%d: Retry-After %q for %v", rej.Status, h.Get("Retry-After"), rej.RetryAfter)
		}
		if d, ok := retrybudget.ParseRetryAfter(h.Get("Retry-After"), time.Now()); !ok || d != rej.RetryAfter {
			t.Fatalf("%d: a client reads Retry-After %q as %v", rej.Status, h.Get("Retry-After"), d)
		}
	case 413, 500:
		if rej.RetryAfter != 0 || h.Get("Retry-After") != "" {
			t.Fatalf("%d with Retry-After %v", rej.Status, rej.RetryAfter)
		}
	default:
		t.Fatalf("status %d (%+v)", rej.Status, rej)
	}
	if got := h.Get(retrybudget.NoRetryHeader) == retrybudget.NoRetryValue; got != shedding {
		t.Fatalf("%d: no-retry header %v", rej.Status, got)
	}
	if (rej.Status == 500) != errors.Is(rej.Err, shed.ErrInvalidRequest) {
		t.Fatalf("%d for %v", rej.Status, rej.Err)
	}
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

// FuzzAddrKey: whatever the host (a RemoteAddr's host or a forwarded
// address: often garbage) and prefix length, the key is the host itself
// when it is not an IP address; the IPv4 address for IPv4 and IPv4-mapped
// hosts; and for IPv6 the canonical, masked prefix of that length that
// holds the address, shared by every other address in it (zone or not),
// and by none outside.
// nat64 is RFC 6052's well-known prefix, whose addresses are IPv4 clients.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

func FuzzAddrKey(f *testing.F) {
	for _, h := range []string{"192.0.2.1", "::ffff:192.0.2.1", "64:ff9b::c000:201", "2001:db8:1:2::1", "fe80::1%eth0", "::", "@", "", "2001:db8::1:80:", "1.2.3.4.5"} {
		f.Add(h, uint8(64), uint64(1))
	}
	f.Fuzz(func(t *testing.T, host string, bits uint8, flip uint64) {
		b := 1 + int(bits)%128
		key := core.AddrKey(host, b)
		a, err := netip.ParseAddr(host)
		switch {
		case err != nil:
			if key != host {
				t.Fatalf("AddrKey(%q) = %q: not an IP, want it unchanged", host, key)
			}
		case a.Is4() || a.Is4In6():
			if k, err := netip.ParseAddr(key); err != nil || !k.Is4() || k != a.Unmap() {
				t.Fatalf("AddrKey(%q) = %q, want the IPv4 address %v", host, key, a.Unmap())
			}
		case nat64.Contains(a.WithZone("")):
			raw := a.As16()
			if want := netip.AddrFrom4([4]byte(raw[12:])).String(); key != want {
				t.Fatalf("AddrKey(%q) = %q, want the translated IPv4 address %s", host, key, want)
			}
		default:
			p, err := netip.ParsePrefix(key)
			if err != nil || p.Bits() != b || p != p.Masked() || p.String() != key || !p.Contains(a.WithZone("")) {
				t.Fatalf("AddrKey(%q, %d) = %q: not the canonical /%d holding it (%v)", host, b, key, b, err)
			}
			// Another address of the prefix (low bits flipped) shares the
			// key; one with a bit of the prefix flipped does not.
			raw := a.As16()
			for i := b; i < 128; i++ {
				if flip>>(i%64)&1 == 1 {
					raw[i/8] ^= 0x80 >> (i % 8)
				}
			}
			if other := netip.AddrFrom16(raw); !other.Is4In6() && !nat64.Contains(other) {
				if k := core.AddrKey(other.String(), b); k != key {
					t.Fatalf("%v and %v share a /%d but get keys %q and %q", a, other, b, key, k)
				}
			}
			raw = a.As16()
			raw[(b-1)/8] ^= 0x80 >> ((b - 1) % 8)
			if other := netip.AddrFrom16(raw); !other.Is4In6() && !nat64.Contains(other) {
				if k := core.AddrKey(other.String(), b); k == key {
					t.Fatalf("%v and %v are in different /%d but share the key %q", a, other, b, key)
				}
			}
		}
	})
}

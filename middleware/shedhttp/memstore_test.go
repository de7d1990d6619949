package shedhttp_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/shedhttp"
)

// TestMemoryStoreDigestKeyCollision: a key spelled like the digest of a
// long key does not share that key's bucket.
func TestMemoryStoreDigestKeyCollision(t *testing.T) {
	s, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1, 0)
	long := strings.Repeat("k", shedhttp.MaxKeyBytes+1)
	sum := sha256.Sum256([]byte(long))
	forged := "sha256:" + hex.EncodeToString(sum[:16])
	lim := shedhttp.RateLimit{Rate: 1e-3, Burst: 1}
	if ok, _ := s.AllowAt(now, 0, long, lim); !ok {
		t.Fatal("the long key's first request was refused")
	}
	if ok, _ := s.AllowAt(now, 0, forged, lim); !ok {
		t.Fatal("a key spelled like the long key's digest shares its bucket")
	}
}

// TestMemoryStoreSharedByDifferentLimits: a store shared by two
// middlewares whose RateLimits for a class differ keeps a bucket per
// limit. Were it one bucket, each request to the loose side would refill
// it at the loose rate, and a client mixing in loose requests would pass
// the strict side at will; sides with the same limit still share tokens.
func TestMemoryStoreSharedByDifferentLimits(t *testing.T) {
	s, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	strict := shedhttp.RateLimit{Rate: 1, Burst: 1}
	loose := shedhttp.RateLimit{Rate: 100, Burst: 100}
	now := time.Unix(1000, 0)
	strictOK := 0
	for range 50 { // one second: a strict request, then a loose one, every 20 ms
		if ok, _ := s.AllowAt(now, 0, "192.0.2.1", strict); ok {
			strictOK++
		}
		s.AllowAt(now.Add(10*time.Millisecond), 0, "192.0.2.1", loose)
		now = now.Add(20 * time.Millisecond)
	}
	if strictOK > 2 { // 1/s with a burst of 1 admits at most 2 in a second
		t.Fatalf("the strict limit admitted %d requests in a second beside a looser one", strictOK)
	}
	if ok, _ := s.AllowAt(now, 1, "192.0.2.9", strict); !ok {
		t.Fatal("a fresh key refused")
	}
	if ok, _ := s.AllowAt(now, 1, "192.0.2.9", strict); ok {
		t.Fatal("two sides with the same limit do not share its tokens")
	}
}

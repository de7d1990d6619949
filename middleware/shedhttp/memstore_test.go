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

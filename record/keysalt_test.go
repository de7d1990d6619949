package record_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

var (
	salt1 = []byte("0123456789abcdef")
	salt2 = []byte("fedcba9876543210")
)

func mustHasher(t testing.TB, salt []byte) *record.KeyHasher {
	t.Helper()
	k, err := record.NewKeyHasher(salt)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestKeyHasher: the salted hash is HMAC-SHA256 truncated (vectors from an
// independent implementation, Python's hmac, so that it stays the same
// across releases), stable within a salt, unrelated across salts and to
// KeyHash, 0 only for "".
func TestKeyHasher(t *testing.T) {
	h1, h2 := mustHasher(t, salt1), mustHasher(t, salt2)
	for _, c := range []struct {
		key      string
		want     uint64 // under salt1
		wantNone bool
	}{
		{key: "", wantNone: true},
		{key: "a", want: 0x0c806ca38a87cad9},
		{key: "foobar", want: 0x86c8129013d13d10},
		{key: "203.0.113.7", want: 0xe25e7aa15f18e79a},
		// Longer than the 64-byte buffer it is written through.
		{key: strings.Repeat("x", 200), want: 0x60105f0d4de3e57e},
	} {
		got := h1.Hash(c.key)
		if c.wantNone {
			if got != 0 || h2.Hash(c.key) != 0 {
				t.Errorf("Hash(%q) = %#x, want 0 (no key)", c.key, got)
			}
			continue
		}
		if got != c.want {
			t.Errorf("Hash(%q) = %#x, want %#x", c.key, got, c.want)
		}
		if again := h1.Hash(c.key); again != got {
			t.Errorf("Hash(%q) = %#x, then %#x", c.key, got, again)
		}
		if other := mustHasher(t, salt1).Hash(c.key); other != got {
			t.Errorf("Hash(%q) = %#x under a second hasher of the same salt, want %#x", c.key, other, got)
		}
		if h2.Hash(c.key) == got || record.KeyHash(c.key) == got {
			t.Errorf("Hash(%q) = %#x under another salt or unsalted too", c.key, got)
		}
	}
	// Never 0 for a key, and no collision among many (1 in 2^64 a pair).
	seen := map[uint64]string{}
	for i := range 20000 {
		k := fmt.Sprint("10.0.", i/256, ".", i%256)
		v := h1.Hash(k)
		if v == 0 {
			t.Fatalf("Hash(%q) = 0", k)
		}
		if prev, ok := seen[v]; ok {
			t.Fatalf("Hash(%q) = Hash(%q)", k, prev)
		}
		seen[v] = k
	}
}

// TestKeyHasherUnsalted: a nil or zero KeyHasher hashes as KeyHash rather
// than panicking.
func TestKeyHasherUnsalted(t *testing.T) {
	var nilK *record.KeyHasher
	for _, k := range []*record.KeyHasher{nilK, {}} {
		if got, want := k.Hash("foobar"), record.KeyHash("foobar"); got != want {
			t.Errorf("Hash = %#x, want KeyHash's %#x", got, want)
		}
	}
}

// TestKeyHasherCopiesSalt: changing the caller's salt afterwards changes
// nothing.
func TestKeyHasherCopiesSalt(t *testing.T) {
	salt := bytes.Clone(salt1)
	k := mustHasher(t, salt)
	want := k.Hash("a")
	salt[0] ^= 0xff
	if got := k.Hash("a"); got != want {
		t.Errorf("Hash = %#x after the salt changed, want %#x", got, want)
	}
}

func TestKeyHasherAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	k := mustHasher(t, salt1)
	if n := testing.AllocsPerRun(1000, func() { k.Hash("tenant-42") }); n != 0 {
		t.Errorf("Hash allocates %v times", n)
	}
}

func TestKeySaltValidation(t *testing.T) {
	for _, c := range []struct {
		name string
		salt []byte
		ok   bool
	}{
		{"nil", nil, false},
		{"empty (a missing secret)", []byte{}, false},
		{"15 bytes", salt1[:15], false},
		{"16 bytes", salt1, true},
		{"64 bytes", bytes.Repeat(salt1, 4), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := record.NewKeyHasher(c.salt)
			check(t, err, c.ok, "salt")
			if c.salt == nil {
				return // nil KeySalt means unsalted
			}
			rec, err := record.New(record.Config{Writer: &bytes.Buffer{}, KeySalt: c.salt})
			check(t, err, c.ok, "KeySalt")
			if err == nil {
				_ = rec.Stop()
			}
		})
	}
}

func check(t *testing.T, err error, ok bool, field string) {
	t.Helper()
	switch {
	case ok && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case !ok && (!errors.Is(err, record.ErrInvalidConfig) || !strings.Contains(err.Error(), field+":")):
		t.Fatalf("got %v, want an ErrInvalidConfig naming %s", err, field)
	}
}

// TestRecorderKeySalt: a recorder with KeySalt hashes through it, one
// without as KeyHash, and the recording carries the salted hash.
func TestRecorderKeySalt(t *testing.T) {
	plain := newRec(t, record.Config{Writer: &bytes.Buffer{}})
	defer plain.Stop()
	if got, want := plain.KeyHash("foobar"), record.KeyHash("foobar"); got != want {
		t.Errorf("unsalted Recorder.KeyHash = %#x, want %#x", got, want)
	}
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Classes: []string{"a"}, KeySalt: salt1})
	k := rec.KeyHash("foobar")
	if want := mustHasher(t, salt1).Hash("foobar"); k != want {
		t.Fatalf("salted Recorder.KeyHash = %#x, want %#x", k, want)
	}
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Decision: record.Rejected, Reason: shed.ReasonRateLimited, Status: 429, Key: k})
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), fmt.Sprintf(`"key":"%016x"`, k)) {
		t.Errorf("the salted key is not in the recording:\n%s", buf.String())
	}
}

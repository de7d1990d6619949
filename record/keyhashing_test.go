package record_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// TestHeaderKeyHashing: a recorder writes how it hashes keys in every
// header (every file of a directory), and the reader gives it back.
func TestHeaderKeyHashing(t *testing.T) {
	for _, c := range []struct {
		name string
		salt []byte
		want string
	}{
		{"unsalted", nil, record.KeyHashingFNV1a},
		{"salted", salt1, "hmac-sha256:f15086f611419a12"},
		{"another salt", salt2, "hmac-sha256:ee4b47ff25030fe3"},
	} {
		t.Run(c.name+"/stream", func(t *testing.T) {
			var buf bytes.Buffer
			rec := newKeyed(t, record.Config{Writer: &buf, KeySalt: c.salt})
			rec.ObserveKeyed(shed.Event{Kind: shed.EventAdmitted, Time: t0, Cost: 1}, rec.KeyHash("tenant"))
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(buf.String(), "\n")
			if want := `,"keys":"` + c.want + `"}`; !strings.HasSuffix(first, want) {
				t.Errorf("header %s, want it to end in %s", first, want)
			}
			rd := record.NewReader(&buf)
			if _, err := rd.Next(); err != nil {
				t.Fatal(err)
			}
			if h, _ := rd.Header(); h.KeyHashing != c.want {
				t.Errorf("KeyHashing %q, want %q", h.KeyHashing, c.want)
			}
		})
		t.Run(c.name+"/dir", func(t *testing.T) {
			dir := t.TempDir()
			rec := newKeyed(t, record.Config{Dir: dir, MaxFileBytes: 300, KeySalt: c.salt})
			for f, h := range rotatedHeaders(t, rec, dir) {
				if h.KeyHashing != c.want {
					t.Errorf("%s: KeyHashing %q, want %q", f, h.KeyHashing, c.want)
				}
			}
		})
	}
}

func newKeyed(t *testing.T, cfg record.Config) *record.Recorder {
	t.Helper()
	cfg.MaxRecordsPerSecond, cfg.Classes = -1, []string{"a"}
	rec, err := record.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestReaderKeyHashing: a version-1 header without "keys" (written before
// it) reads as unknown, any hashing is kept as it is (a newer writer's
// too), and a malformed one is an error on the header's line.
func TestReaderKeyHashing(t *testing.T) {
	head := strings.TrimSuffix(v1Header, "}\n")
	for _, c := range []struct {
		name, header, want string
		err                bool
	}{
		{"older v1, no field", v1Header, "", false},
		{"unsalted", head + `,"keys":"fnv1a"}` + "\n", "fnv1a", false},
		{"salted", head + `,"keys":"hmac-sha256:f15086f611419a12"}` + "\n", "hmac-sha256:f15086f611419a12", false},
		{"a newer scheme", head + `,"keys":"siphash:0011"}` + "\n", "siphash:0011", false},
		{"empty means unknown", head + `,"keys":""}` + "\n", "", false},
		{"too long", head + `,"keys":"` + strings.Repeat("x", 129) + `"}` + "\n", "", true},
		{"not a string", head + `,"keys":1}` + "\n", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rd := record.NewReader(strings.NewReader(c.header + `{"k":"admit","t":1,"c":0,"key":"00000000000000ff"}` + "\n"))
			r, err := rd.Next()
			if c.err {
				var fe *record.FormatError
				if !errors.As(err, &fe) || fe.Line != 1 {
					t.Fatalf("got %v, want an ErrFormat on line 1", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			h, _ := rd.Header()
			if h.KeyHashing != c.want || r.Key != 0xff || h.Version != 1 {
				t.Errorf("KeyHashing %q, key %#x, version %d; want %q, 0xff, 1", h.KeyHashing, r.Key, h.Version, c.want)
			}
		})
	}
}

// TestKeyHashing: a salt's fingerprint is the same for equal salts (and
// for salts HMAC takes as one key, which hash every key the same),
// differs for different ones, and shows nothing of the salt: no prefix
// of it, in bytes or hex, and none of the key hashes under it.
func TestKeyHashing(t *testing.T) {
	if got := (*record.KeyHasher)(nil).Hashing(); got != record.KeyHashingFNV1a {
		t.Errorf("nil KeyHasher: %q, want %q", got, record.KeyHashingFNV1a)
	}
	if got := new(record.KeyHasher).Hashing(); got != record.KeyHashingFNV1a {
		t.Errorf("zero KeyHasher: %q, want %q", got, record.KeyHashingFNV1a)
	}
	long := bytes.Repeat([]byte{0xa5}, 100) // longer than SHA-256's block
	for _, c := range []struct {
		name  string
		a, b  []byte
		equal bool
	}{
		{"same salt, another slice", salt1, []byte(string(salt1)), true},
		{"zero-padded (one HMAC key)", salt1, append([]byte(string(salt1)), 0), true},
		{"another salt", salt1, salt2, false},
		{"one bit apart", salt1, []byte("0123456789abcdeg"), false},
		{"a prefix", append([]byte(string(salt1)), 'x'), salt1, false},
		{"long salts", long, append(long[:99:99], 0xa4), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ha, hb := mustHasher(t, c.a), mustHasher(t, c.b)
			fa, fb := ha.Hashing(), hb.Hashing()
			if (fa == fb) != c.equal {
				t.Errorf("fingerprints %s and %s: equal %v, want %v", fa, fb, fa == fb, c.equal)
			}
			if (ha.Hash("k") == hb.Hash("k")) != c.equal {
				t.Errorf("the key hashes do not agree with the fingerprints")
			}
			checkHidden(t, c.a, ha)
			checkHidden(t, c.b, hb)
		})
	}
}

// checkHidden fails when k's fingerprint shows salt or a key hash.
func checkHidden(t *testing.T, salt []byte, k *record.KeyHasher) {
	t.Helper()
	fp, ok := strings.CutPrefix(k.Hashing(), record.KeyHashingHMACPrefix)
	raw, err := hex.DecodeString(fp)
	if !ok || err != nil || len(raw) != 8 {
		t.Fatalf("Hashing %q: want %s and 16 hex digits", k.Hashing(), record.KeyHashingHMACPrefix)
	}
	for n := 4; n <= len(salt); n++ {
		p := salt[:n]
		if bytes.Contains(raw, p[:min(n, 8)]) || strings.Contains(fp, hex.EncodeToString(p)[:min(2*n, 16)]) ||
			strings.Contains(fp, string(p[:min(n, 16)])) {
			t.Fatalf("fingerprint %s shows the salt's prefix %x", fp, p)
		}
	}
	for _, key := range []string{"a", "tenant", "203.0.113.7", "fingerprint", record.KeyHashingHMACPrefix, string(salt)} {
		if fmt.Sprintf("%016x", k.Hash(key)) == fp {
			t.Fatalf("fingerprint %s is the hash of key %q", fp, key)
		}
	}
}

// TestOpenNamesFile: Reader.File names the file whose header it read.
func TestOpenNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "record-000001.jsonl")
	if err := os.WriteFile(path, []byte(v1Header+`{"k":"admit","t":1,"c":0}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rd, err := record.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if _, err := rd.Next(); err != nil || rd.File() != path {
		t.Errorf("File %q (%v), want %q", rd.File(), err, path)
	}
	if got := record.NewReader(strings.NewReader(v1Header)).File(); got != "" {
		t.Errorf("stream: File %q, want \"\"", got)
	}
}

// rotatedHeaders records keyed admissions into dir until the recorder
// rotates, stops it and returns each file's header by path.
func rotatedHeaders(t *testing.T, rec *record.Recorder, dir string) map[string]record.Header {
	t.Helper()
	for i := range 10 {
		ev := shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(time.Duration(i) * time.Millisecond), Cost: 1}
		rec.ObserveKeyed(ev, rec.KeyHash(fmt.Sprint("tenant", i)))
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "record-*.jsonl"))
	if len(files) < 2 {
		t.Fatalf("%d files, want a rotation", len(files))
	}
	headers := make(map[string]record.Header, len(files))
	for _, f := range files {
		rd, err := record.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		rd.Next()
		headers[f], _ = rd.Header()
		rd.Close()
	}
	return headers
}

package record

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"sync"
)

// MinKeySaltBytes is the shortest salt NewKeyHasher and Config.KeySalt
// accept: 128 bits, so that the salt itself cannot be found by search.
const MinKeySaltBytes = 16

// KeyHasher hashes tenant keys with a secret salt, for recordings that
// leave the host: without the salt, a key is not found again by hashing
// every candidate. Like KeyHash, it returns 0 for "" and never 0 for
// another key, and the same key hashes the same under the same salt (in
// every process and release), so that a fit counts distinct tenants
// across the files of a recording made with one salt. Hashes under
// different salts, or unsalted, are unrelated.
//
// A Recorder made with Config.KeySalt hashes through one
// (Recorder.KeyHash); drivers that pass hashes to ObserveKeyed themselves
// can make their own. The zero KeyHasher, and a nil one, hash as KeyHash
// (unsalted). It is safe for concurrent use.
type KeyHasher struct {
	pool    sync.Pool // of *keyMAC: an HMAC is not safe for concurrent use
	hashing string    // Header.KeyHashing of its hashes
}

// Header.KeyHashing values: how a recording's keys are hashed.
const (
	// KeyHashingFNV1a: unsalted, KeyHash.
	KeyHashingFNV1a = "fnv1a"
	// KeyHashingHMACPrefix is followed by 16 hex digits, the salt's
	// fingerprint: salted, KeyHasher.
	KeyHashingHMACPrefix = "hmac-sha256:"
)

// fingerprintLabel is what a salt's fingerprint is the HMAC of.
const fingerprintLabel = "shedkit-record key salt fingerprint v1"

// keyMAC is one HMAC with the buffers it writes and sums into, pooled
// together so that Hash allocates nothing.
type keyMAC struct {
	mac hash.Hash
	buf [64]byte
	sum [sha256.Size]byte
}

// NewKeyHasher returns a KeyHasher for salt, which must be at least
// MinKeySaltBytes long (32 random bytes, from crypto/rand, kept secret
// and unchanged for as long as a recording is to be fitted as one), or an
// error wrapping ErrInvalidConfig. It copies salt.
func NewKeyHasher(salt []byte) (*KeyHasher, error) {
	if err := checkSalt("salt", salt); err != nil {
		return nil, err
	}
	salt = append([]byte(nil), salt...)
	k := &KeyHasher{}
	// HMAC-SHA256 (RFC 2104): the standard library's keyed PRF, a MAC
	// proven secure when SHA-256's compression function is a PRF, with
	// no length extension (unlike SHA-256(salt || key)) and hardware
	// SHA-256 on current CPUs; hash/maphash is neither cryptographic
	// nor seedable from bytes. Truncation to 64 bits (the format's key)
	// keeps it a PRF; collisions merge two tenants, 1 in 2^64 a pair.
	k.pool.New = func() any { return &keyMAC{mac: hmac.New(sha256.New, salt)} }
	k.hashing = KeyHashingHMACPrefix + hex.EncodeToString(saltFingerprint(salt))
	return k, nil
}

// saltFingerprint identifies salt in a header: the first 8 bytes of
// HMAC-SHA256(salt, fingerprintLabel). HMAC under the salt is a PRF, so
// it tells only whether two salts are equal (1 in 2^64 that two differ
// yet match); checking a guessed salt against it costs a search of the
// salt's 2^128 or more. The fixed label keeps it apart from the key
// hashes: only a tenant key spelled as the label would hash to it.
func saltFingerprint(salt []byte) []byte {
	m := hmac.New(sha256.New, salt)
	m.Write([]byte(fingerprintLabel))
	return m.Sum(nil)[:8]
}

// Hashing returns how k hashes keys, as a recording's header says it
// (Header.KeyHashing): KeyHashingFNV1a for the zero or a nil KeyHasher,
// else KeyHashingHMACPrefix and the fingerprint of the salt, which tells
// recordings made under one salt from those made under another and
// reveals nothing else about it.
func (k *KeyHasher) Hashing() string {
	if k == nil || k.hashing == "" {
		return KeyHashingFNV1a
	}
	return k.hashing
}

func checkSalt(field string, salt []byte) error {
	if len(salt) < MinKeySaltBytes {
		return configError(field, "at least %d bytes, got %d", MinKeySaltBytes, len(salt))
	}
	return nil
}

// Hash returns what a recording made with k's salt stores for the tenant
// key key: the first 64 bits of HMAC-SHA256(salt, key), 1 in place of 0
// (which means no key), 0 for "".
func (k *KeyHasher) Hash(key string) uint64 {
	if k == nil || k.pool.New == nil {
		return KeyHash(key)
	}
	if key == "" {
		return 0
	}
	m := k.pool.Get().(*keyMAC)
	m.mac.Reset() // back to the salt's precomputed state
	// Through the pooled buffer: a []byte(key) conversion would escape
	// into the interface call and allocate.
	for len(key) > 0 {
		n := copy(m.buf[:], key)
		m.mac.Write(m.buf[:n])
		key = key[n:]
	}
	h := binary.BigEndian.Uint64(m.mac.Sum(m.sum[:0]))
	k.pool.Put(m)
	return max(h, 1)
}

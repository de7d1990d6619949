package grpc

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// ServerConfig configures the server interceptors. Only Limiter is
// required; zero fields take the documented defaults.
type ServerConfig struct {
	// Limiter is the admission controller every call that is not skipped
	// must pass. Required.
	Limiter *shed.Limiter

	// Methods maps full method names ("/pkg.Service/Method") or prefixes
	// of them ("/pkg.Service/") to class names. An exact match wins, then
	// the longest prefix. Calls that match none get DefaultClass.
	Methods map[string]string
	// DefaultClass is the class of calls that nothing else classifies.
	// Default: the limiter's last (lowest-priority) class, so that no call
	// gets priority unless the configuration gives it one.
	DefaultClass string
	// ClassMetadata names a trusted metadata key whose value is a class
	// name; it overrides Methods when the call carries exactly one value
	// and it names a class. Name a key only if a proxy in front of the
	// service sets it and overwrites whatever a client sent. Empty (the
	// default): a client's metadata never chooses a class.
	ClassMetadata string
	// KeyMetadata names a trusted metadata key (set by a proxy or an
	// authentication layer: tenant, API key) whose value is the rate-limit
	// key. Empty, absent or repeated: the key is the peer's address (see
	// IPv6KeyPrefix).
	KeyMetadata string
	// TenantFromKey holds every call to a fair share of its class for its
	// rate-limit key (KeyMetadata, else the peer's address, else what
	// Classify set) unless Classify set a Tenant of its own: while a class
	// is contended, a key that holds its share is answered Unavailable
	// with a pushback (tenant_share), so that one noisy tenant cannot
	// crowd out the others (see shed.Request.Tenant). Off by default.
	TenantFromKey bool
	// IPv6KeyPrefix is the prefix length, in bits, of the default key of
	// an IPv6 peer: all the addresses of one /64 (the default,
	// shedhttp.DefaultIPv6KeyPrefix) share one rate-limit bucket. IPv4
	// peers, also those seen through stateless translation
	// (64:ff9b::/96), are keyed by their IPv4 address.
	IPv6KeyPrefix int
	// Classify, when set, refines the default classification (computed
	// from Methods, DefaultClass, ClassMetadata, KeyMetadata and the
	// call's deadline, passed as def): for example it sets the cost from
	// the request message. It runs on every call that is not skipped,
	// before rate limiting, and must be fast and safe for concurrent use.
	// A Deadline it sets counts when it is earlier than the call's: the
	// limiter judges the call by it and the handler's context ends at it;
	// it never extends the call. For a message of a PerMessageStreams
	// stream only the limiter judges the message by it: the stream's
	// context, which all its messages share, keeps the call's deadline.
	Classify func(ctx context.Context, call Call, def shedhttp.Classification) shedhttp.Classification

	// RateLimits maps class names to a per-key rate limit. Classes without
	// an entry are not rate limited. Over its rate a call fails with
	// ResourceExhausted before it reaches the limiter.
	RateLimits map[string]shedhttp.RateLimit
	// KeyStore keeps the per-key rate-limit state. Default: a
	// shedhttp.MemoryStore of shedhttp.DefaultMaxKeys buckets, created
	// when RateLimits is not empty. It may be shared with the HTTP
	// middleware, so that a client's rate covers both protocols.
	KeyStore shedhttp.KeyStore
	// RateLimitDryRun reports rate-limit rejections (span attributes,
	// Observer) but lets the calls through.
	RateLimitDryRun bool

	// SkipMethods are full method names (health checks, reflection) that
	// bypass the interceptors entirely.
	SkipMethods []string

	// PerMessageStreams are full method names of client-streaming and
	// bidirectional methods admitted per message instead of per stream:
	// the stream holds no permit while it waits for its client; each
	// message the handler receives is classified (Call.Request is the
	// message), rate limited and admitted before RecvMsg returns it, and
	// its permit is held until the handler asks for the next message or
	// returns. A message that is not admitted fails RecvMsg with the
	// rejection's status, which ends the stream when the handler returns
	// it. For long streams whose messages are units of work (a chat, a
	// feed of jobs); other streams hold one permit for their life.
	PerMessageStreams []string

	// Outcome maps the handler's error to its permit's outcome. Default
	// DefaultOutcome. It is not called when the handler panicked or the
	// call's context ended; see the package documentation.
	Outcome func(call Call, err error) shed.Outcome

	// NoRetryPushback makes every rejection carry a negative
	// grpc-retry-pushback-ms ("do not retry"), as the HTTP middleware's
	// Shedkit-No-Retry header does, instead of the limiter's hint. Use it
	// when retries belong to an outer layer only.
	NoRetryPushback bool

	// Observer, when set, is told about the rejections the interceptors
	// decide themselves (rate limiting), as shed.EventRejected events
	// with shed.ReasonRateLimited.
	Observer shed.Observer
	// Clock replaces time.Now for rate limiting and for the Recorder's
	// readings. For tests.
	Clock func() time.Time

	// Recorder, when set, records a sample of the calls (class, cost,
	// decision, queue wait, latency, outcome, status, and the hash of the
	// rate-limit key when there is one, Recorder.KeyHash: salted when
	// record.Config.KeySalt is set, never the key itself) and the
	// limiter's limit over time, for shedsim fit, as the HTTP middleware
	// records requests. A stream is one record, or one per message under
	// PerMessageStreams. The status is the HTTP status the call's gRPC
	// code maps to (google.rpc.Code's mapping: OK 200, Canceled 499,
	// InvalidArgument 400, ResourceExhausted 429, Unavailable 503,
	// DeadlineExceeded 504, Internal 500...), none after a panic.
	// NewServer makes it watch Limiter and tells it where the keys come
	// from (Recorder.SetKeySource): KeyMetadata, named as the HTTP/2
	// header it travels in ("header:X-Tenant"), else the peer's address;
	// with Classify, as the calls show it: those while it keeps the keys,
	// "classify" if it replaces them, none if it does both. Only sampled calls read the
	// clock; the others cost a few atomic adds. Start and Stop it
	// yourself (see package record). Off (nil) by default.
	Recorder *record.Recorder
}

// Call describes the call being admitted, for Classify and Outcome.
type Call struct {
	// FullMethod is the method's full name, "/pkg.Service/Method".
	FullMethod string
	// Request is the request message of a unary call, nil for streams.
	Request any
	// Stream is true for streaming calls; ClientStream and ServerStream
	// say which side streams.
	Stream, ClientStream, ServerStream bool
	// PerMessage is true when the unit of work is one message of a
	// stream admitted per message (ServerConfig.PerMessageStreams).
	PerMessage bool
}

// clientBound reports whether the work's duration is set by its client:
// a client-streaming or bidirectional stream lasts as long as the client
// keeps sending (a message of it does not).
func (c *Call) clientBound() bool { return c.ClientStream && !c.PerMessage }

// ErrInvalidConfig is wrapped by the configuration errors of NewServer and
// NewClient. It is shedhttp.ErrInvalidConfig, so that one errors.Is test
// covers every shedkit middleware.
var ErrInvalidConfig = shedhttp.ErrInvalidConfig

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

type prefixRule struct {
	prefix string
	class  shed.Class
}

type rateRule struct {
	on    bool
	limit shedhttp.RateLimit
}

// Server holds the server interceptors' configuration. It is safe for
// concurrent use; one Server may serve several grpc.Servers. Make one with
// NewServer: the zero Server is not usable.
type Server struct {
	lim         *shed.Limiter
	exact       map[string]shed.Class
	prefixes    []prefixRule // longest first
	defClass    shed.Class
	classMD     string
	keyMD       string
	v6Bits      int
	classify    func(context.Context, Call, shedhttp.Classification) shedhttp.Classification
	rates       [shed.MaxClasses]rateRule
	anyRate     bool
	store       shedhttp.KeyStore
	rateDryRun  bool
	skip        map[string]struct{}
	perMsg      map[string]struct{}
	outcome     func(Call, error) shed.Outcome
	noRetry     bool
	observer    shed.Observer
	clock       func() time.Time
	classNames  []string
	needPeerKey bool
	tenantKey   bool             // TenantFromKey
	rec         *record.Recorder // see record.go
	reclass     atomic.Uint32    // what Classify did to keys (see reclassified)
}

// NewServer validates cfg and returns the interceptors' Server, or an error
// naming the invalid field (wrapping ErrInvalidConfig).
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Limiter == nil {
		return nil, configError("Limiter", "required")
	}
	s := &Server{
		lim:        cfg.Limiter,
		classify:   cfg.Classify,
		store:      cfg.KeyStore,
		rateDryRun: cfg.RateLimitDryRun,
		outcome:    cfg.Outcome,
		noRetry:    cfg.NoRetryPushback,
		observer:   cfg.Observer,
		clock:      cfg.Clock,
	}
	for _, c := range cfg.Limiter.Snapshot().Classes {
		s.classNames = append(s.classNames, c.Name)
	}
	s.defClass = shed.Class(len(s.classNames) - 1)
	if cfg.DefaultClass != "" {
		c, err := s.class("DefaultClass", cfg.DefaultClass)
		if err != nil {
			return nil, err
		}
		s.defClass = c
	}
	if err := s.setMethods(cfg.Methods); err != nil {
		return nil, err
	}
	if err := s.setMetadata(cfg); err != nil {
		return nil, err
	}
	if err := s.setRates(cfg.RateLimits); err != nil {
		return nil, err
	}
	for i, m := range cfg.SkipMethods {
		if !strings.HasPrefix(m, "/") {
			return nil, configError(fmt.Sprintf("SkipMethods[%d]", i), "a full method name starts with \"/\", got %q", m)
		}
		if s.skip == nil {
			s.skip = make(map[string]struct{}, len(cfg.SkipMethods))
		}
		s.skip[m] = struct{}{}
	}
	for i, m := range cfg.PerMessageStreams {
		if !strings.HasPrefix(m, "/") {
			return nil, configError(fmt.Sprintf("PerMessageStreams[%d]", i), "a full method name starts with \"/\", got %q", m)
		}
		if s.perMsg == nil {
			s.perMsg = make(map[string]struct{}, len(cfg.PerMessageStreams))
		}
		s.perMsg[m] = struct{}{}
	}
	if s.outcome == nil {
		s.outcome = DefaultOutcome
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	s.tenantKey = cfg.TenantFromKey
	s.needPeerKey = s.anyRate || s.classify != nil || s.tenantKey
	if err := s.setRecorder(&cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// class resolves a configured class name, naming field in the error.
func (s *Server) class(field, name string) (shed.Class, error) {
	c, ok := s.lim.ClassByName(name)
	if !ok {
		return 0, configError(field, "unknown class %q (the limiter's classes are %s)", name, strings.Join(s.classNames, ", "))
	}
	return c, nil
}

func (s *Server) setMethods(methods map[string]string) error {
	if len(methods) > 0 {
		s.exact = make(map[string]shed.Class, len(methods))
	}
	for m, name := range methods {
		field := fmt.Sprintf("Methods[%q]", m)
		if !strings.HasPrefix(m, "/") {
			return configError(field, "a full method name or prefix starts with \"/\"")
		}
		c, err := s.class(field, name)
		if err != nil {
			return err
		}
		s.exact[m] = c
		s.prefixes = append(s.prefixes, prefixRule{m, c})
	}
	sort.Slice(s.prefixes, func(i, j int) bool {
		if a, b := len(s.prefixes[i].prefix), len(s.prefixes[j].prefix); a != b {
			return a > b
		}
		return s.prefixes[i].prefix < s.prefixes[j].prefix
	})
	return nil
}

func (s *Server) setMetadata(cfg ServerConfig) error {
	for _, f := range []struct {
		field, key string
		dst        *string
	}{{"ClassMetadata", cfg.ClassMetadata, &s.classMD}, {"KeyMetadata", cfg.KeyMetadata, &s.keyMD}} {
		if f.key == "" {
			continue
		}
		if !validMetadataKey(f.key) {
			return configError(f.field, "invalid metadata key %q", f.key)
		}
		// gRPC lower-cases incoming metadata keys.
		*f.dst = strings.ToLower(f.key)
	}
	switch p := cfg.IPv6KeyPrefix; {
	case p == 0:
		s.v6Bits = shedhttp.DefaultIPv6KeyPrefix
	case p < 0 || p > 128:
		return configError("IPv6KeyPrefix", "must be a prefix length in [1, 128] (0 for the default %d), got %d", shedhttp.DefaultIPv6KeyPrefix, p)
	default:
		s.v6Bits = p
	}
	return nil
}

// validMetadataKey accepts what gRPC accepts in a metadata key, minus the
// binary suffix (a class name or a key is text) and the reserved "grpc-"
// prefix.
func validMetadataKey(k string) bool {
	lk := strings.ToLower(k)
	if strings.HasSuffix(lk, "-bin") || strings.HasPrefix(lk, "grpc-") {
		return false
	}
	for i := 0; i < len(lk); i++ {
		c := lk[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func (s *Server) setRates(rates map[string]shedhttp.RateLimit) error {
	for name, rl := range rates {
		field := fmt.Sprintf("RateLimits[%q]", name)
		c, err := s.class(field, name)
		if err != nil {
			return err
		}
		if err := rl.Validate(); err != nil {
			return configError(field, "%v", err)
		}
		s.rates[c] = rateRule{on: true, limit: rl}
		s.anyRate = true
	}
	if s.anyRate && s.store == nil {
		st, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{})
		if err != nil {
			return err
		}
		s.store = st
	}
	return nil
}

package gcl

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/platinummonkey/go-concurrency-limits/core"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
)

// Name is the name given to the limits built by NewGradient2, NewVegas
// and NewAIMD (the library uses it for metric names only).
const Name = "shedkit"

// DefaultMinSamples is the default Window.MinSamples of a Source: 100, the
// window size of the library's DefaultLimiter.
const DefaultMinSamples = 100

// RTT selects the latency of a window that a Source passes to the limit.
type RTT uint8

const (
	// RTTMin passes the fastest timed success of the window, as the
	// library's DefaultLimiter does.
	RTTMin RTT = iota
	// RTTWindow passes the window's statistic: the mean (as the library's
	// WindowedLimit does), or Window.Quantile when set.
	RTTWindow
)

// Config configures a Source. Zero fields take the defaults.
type Config struct {
	// Window aggregates samples before they reach the limit. Zero fields
	// take the defaults of package limits, except MinSamples, which
	// defaults to DefaultMinSamples: together, 1 s windows of at least 100
	// samples, like the library's DefaultLimiter (which, unlike Window,
	// never closes an under-filled window).
	Window limits.WindowConfig
	// RTT selects the latency passed per window. Default RTTMin.
	RTT RTT
	// PerSample passes every sample to the limit as it arrives instead of
	// one aggregate per window. Use it for a limit that windows samples
	// itself (limit.WindowedLimit). Each sample then takes the library's
	// mutex.
	PerSample bool
}

// ErrNilLimit is returned by FromCore for a nil limit.
var ErrNilLimit = errors.New("gcl: nil core.Limit")

// Source makes a go-concurrency-limits core.Limit a shed.LimitSource.
//
// Limit is an atomic load of the limit cached from the library's change
// notifications and re-read after every OnSample; an estimate never
// replaces a newer one, whichever goroutine publishes last. Observe
// aggregates samples in a lock-free limits.Window and passes one sample
// per window to the library's OnSample (startTime: window start in Unix
// ns; rtt: the window's latency in ns, at least 1; inFlight: the window's
// largest in-flight count; didDrop: whether the window had any drop). A
// window without timed successes passes the last known rtt; until one is
// known it is skipped, since a made-up rtt would corrupt the library's
// averages.
type Source struct {
	// state is the published limit (low valueBits) and the ticket of the
	// estimate it came from (the bits above): one word, so that Limit is a
	// single load and a publisher can compare and swap both at once.
	state atomic.Uint64
	// tickets orders the estimates: a publisher takes one before it learns
	// the estimate, and an estimate is published only over an older one.
	tickets atomic.Uint64
	core    core.Limit
	win     *limits.Window // nil in per-sample mode
	rtt     RTT

	lastRTT atomic.Int64 // ns; 0 until a timed success was seen
	mu      sync.Mutex   // serializes per-window forwarding

	// ceiling caps the limit read from the library, for a Tuning.MaxLimit
	// the library cannot apply itself (AIMD), and the work in flight it is
	// told of: a shed.Limiter's dry run admits past the limit, and an
	// estimate grown on that work would stay hidden above the cap, backing
	// off from there when drops come. Default shed.MaxLimit, the most a
	// Limiter enforces.
	ceiling int
}

// FromCore wraps l. The Source trusts l to notify its changes in the order
// it makes them, as the library's limits do (they notify under the lock
// that guards the change).
func FromCore(l core.Limit, cfg Config) (*Source, error) {
	return fromCore(l, cfg, 0)
}

// fromCore wraps l, capping the limit it reports at ceiling (0: none).
func fromCore(l core.Limit, cfg Config, ceiling int) (*Source, error) {
	if l == nil {
		return nil, ErrNilLimit
	}
	if cfg.RTT > RTTWindow {
		return nil, configError("Config.RTT", "unknown value %d", cfg.RTT)
	}
	if ceiling <= 0 {
		ceiling = shed.MaxLimit
	}
	s := &Source{core: l, rtt: cfg.RTT, ceiling: ceiling}
	if !cfg.PerSample {
		if cfg.Window.MinSamples == 0 {
			cfg.Window.MinSamples = DefaultMinSamples
		}
		w, err := limits.NewWindow(cfg.Window)
		if err != nil {
			return nil, err
		}
		s.win = w
	}
	// Listen before the first read: a change made meanwhile by another
	// user of l is then notified, and its newer ticket outranks the read.
	l.NotifyOnChange(s.notified)
	s.refresh()
	return s, nil
}

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", limits.ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// NewGradient2 returns a Source around the library's Gradient2 limit with
// its default tuning (initial 20, min 20, max 200, queue size 4, smoothing
// 0.2, long window 600). NewGradient2Tuned changes its limits.
func NewGradient2(cfg Config) (*Source, error) {
	return NewGradient2Tuned(cfg, Tuning{})
}

// NewVegas returns a Source around the library's Vegas limit with its
// default tuning (initial 20, max 1000, smoothing 1, alpha 3 log10(limit),
// beta 6 log10(limit), probe multiplier 30). NewVegasTuned changes its
// limits and can turn the probe off.
func NewVegas(cfg Config) (*Source, error) {
	return NewVegasTuned(cfg, Tuning{})
}

// NewAIMD returns a Source around the library's AIMD limit with its
// default tuning (initial 10, backoff 0.9, increase 1, no maximum).
// NewAIMDTuned changes its limits.
func NewAIMD(cfg Config) (*Source, error) {
	return NewAIMDTuned(cfg, Tuning{})
}

// Core returns the wrapped limit.
func (s *Source) Core() core.Limit { return s.core }

// Limit returns the library's latest estimate, clamped to at least 1 and
// at most Tuning.MaxLimit (shed.MaxLimit without one). It is an atomic
// load.
func (s *Source) Limit() int { return int(s.state.Load() & valueMask) }

// valueBits holds any limit a Source publishes (at most shed.MaxLimit);
// the remaining 40 bits of the ticket wrap after 2^40 estimates, which
// newer's serial comparison allows.
const (
	valueBits = 24
	valueMask = 1<<valueBits - 1
)

// A shed.MaxLimit that outgrows valueBits fails to compile here.
const _ = uint64(valueMask - shed.MaxLimit)

// notified is the library's change listener. The library's limits notify
// while holding the lock under which they changed, so the estimate is
// still current when the ticket is taken.
func (s *Source) notified(n int) { s.store(s.tickets.Add(1), n) }

// refresh publishes the library's estimate, for limits that change without
// notifying. The ticket is taken before the read, so that a change the
// read misses is notified with a newer ticket and is not overwritten.
func (s *Source) refresh() {
	t := s.tickets.Add(1)
	s.store(t, s.core.EstimatedLimit())
}

// store publishes n, the estimate of ticket t, unless a newer one is
// already published: a goroutine preempted between reading an estimate and
// storing it would otherwise bring back a limit the library has left. A
// NaN estimate converts to an arbitrary integer, hence the clamp.
func (s *Source) store(t uint64, n int) {
	v := t<<valueBits | uint64(min(max(n, 1), s.ceiling))
	for {
		old := s.state.Load()
		if !newer(v, old) || s.state.CompareAndSwap(old, v) {
			return
		}
	}
}

// newer reports whether state a carries a newer ticket than state b. The
// tickets are compared as serial numbers (RFC 1982), so that they may
// wrap; the order holds unless a publisher stalls between its ticket and
// its store while 2^39 other estimates are published.
func newer(a, b uint64) bool {
	return int64((a>>valueBits-b>>valueBits)<<valueBits) > 0
}

// Observe records a finished unit of work. A panic of the wrapped
// library is not recovered: it reaches the caller of Release, which a
// shed.LimitSource must not do; the samples passed on keep the library's
// algorithms from panicking (a latency of at least 1 ns, no NaN).
func (s *Source) Observe(x shed.Sample) {
	if s.win == nil {
		s.observeOne(x)
		return
	}
	if x.Timed && !x.Dropped {
		// Only timed successes teach the window a latency; remember one
		// for windows of drops only.
		if s.lastRTT.Load() == 0 {
			s.lastRTT.CompareAndSwap(0, max(int64(x.Latency), 1))
		}
	}
	if w, ok := s.win.Record(x); ok {
		s.forward(w)
	}
}

func (s *Source) forward(w limits.WindowSummary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rtt int64
	switch {
	case w.Samples == 0:
		rtt = s.lastRTT.Load()
		if rtt == 0 {
			return
		}
	case s.rtt == RTTMin:
		rtt = int64(w.Min)
	default:
		rtt = int64(w.Latency)
	}
	rtt = max(rtt, 1) // the library divides by rtt, and treats 0 as unset
	if w.Samples > 0 {
		s.lastRTT.Store(rtt)
	}
	s.core.OnSample(w.Start.UnixNano(), rtt, min(w.MaxInFlight, s.ceiling), w.Drops > 0)
	s.refresh()
}

// observeOne passes one sample on. Untimed successes carry nothing the
// library can use; untimed drops borrow the last known latency.
func (s *Source) observeOne(x shed.Sample) {
	rtt := int64(x.Latency)
	switch {
	case x.Timed:
		rtt = max(rtt, 1)
		if !x.Dropped {
			s.lastRTT.Store(rtt)
		}
	case x.Dropped:
		if rtt = s.lastRTT.Load(); rtt == 0 {
			return
		}
	default:
		return
	}
	var start int64
	if !x.Now.IsZero() {
		start = x.Now.Add(-time.Duration(rtt)).UnixNano()
	}
	s.core.OnSample(start, rtt, min(x.InFlight, s.ceiling), x.Dropped)
	s.refresh()
}

var _ shed.LimitSource = (*Source)(nil)

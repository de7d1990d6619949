package failsafesim

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"

	"github.com/shedkit/shedkit/shed"
)

// Defaults of failsafe-go v0.9.8's adaptivelimiter.NewBuilder, applied to
// zero fields of Config, so that the simulator compares its default tuning.
const (
	DefaultMinLimit          = 1
	DefaultMaxLimit          = 200
	DefaultInitialLimit      = 20
	DefaultMaxLimitFactor    = 5.0
	DefaultWindowMin         = time.Second
	DefaultWindowMax         = 30 * time.Second
	DefaultWindowMinSamples  = 50
	DefaultQuantile          = 0.9
	DefaultBaselineAge       = 10
	DefaultCorrelationWindow = 50
)

// Drops says what a shed.Dropped release tells failsafe-go.
type Drops uint8

const (
	// DropsRecord records the dropped work's latency (Permit.Record), as
	// failsafe-go's executor does for an execution that returned an error.
	DropsRecord Drops = iota
	// DropsDrop releases it without a sample (Permit.Drop), as failsafe-go's
	// executor does for a cancelled execution.
	DropsDrop
)

// Config configures the failsafe-go limiter. Zero fields take failsafe-go's
// defaults (the Default constants).
type Config struct {
	// MinLimit, MaxLimit and InitialLimit bound and start the limit
	// (WithLimits). A default gives way to the values given: MaxLimit
	// defaults to DefaultMaxLimit or, if higher, MinLimit or InitialLimit;
	// InitialLimit defaults to DefaultInitialLimit clamped into
	// [MinLimit, MaxLimit]. MaxLimit is at most shed.MaxLimit.
	MinLimit, MaxLimit, InitialLimit uint
	// MaxLimitFactor caps the limit at this multiple of the largest
	// in-flight count of the last window (WithMaxLimitFactor), >= 1.
	MaxLimitFactor float64
	// WindowMin, WindowMax and WindowMinSamples configure the recent
	// window (WithRecentWindow).
	WindowMin, WindowMax time.Duration
	WindowMinSamples     uint
	// Quantile of recent latencies compared with the baseline
	// (WithRecentQuantile), in (0, 1).
	Quantile float64
	// BaselineAge (WithBaselineWindow) and CorrelationWindow
	// (WithCorrelationWindow).
	BaselineAge       uint
	CorrelationWindow uint
	// Drops maps shed.Dropped releases; see the package documentation.
	Drops Drops
}

// ErrInvalidConfig is wrapped by configuration errors from New.
var ErrInvalidConfig = errors.New("failsafesim: invalid config")

// ErrUnsupportedVersion is returned by New when failsafe-go's permit does
// not have the fields this package writes (another failsafe-go version).
var ErrUnsupportedVersion = errors.New("failsafesim: failsafe-go's permit layout is not the one of v0.9.8; the virtual clock cannot be injected")

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// withDefaults validates c (failsafe-go's builder panics on bad values)
// and fills in defaults.
func (c Config) withDefaults() (Config, error) {
	if c.MinLimit == 0 {
		c.MinLimit = DefaultMinLimit
	}
	if c.MaxLimit == 0 {
		// A default gives way to the limits given, as in package limits
		// and limits/gcl: a warm start above 200 raises the maximum.
		c.MaxLimit = min(max(DefaultMaxLimit, c.MinLimit, c.InitialLimit), shed.MaxLimit)
	}
	if c.InitialLimit == 0 {
		c.InitialLimit = min(max(DefaultInitialLimit, c.MinLimit), c.MaxLimit)
	}
	if c.MaxLimit > shed.MaxLimit {
		return c, configError("MaxLimit", "must be <= %d, got %d", shed.MaxLimit, c.MaxLimit)
	}
	if c.MinLimit > c.MaxLimit {
		return c, configError("MinLimit", "must be <= MaxLimit (%d), got %d", c.MaxLimit, c.MinLimit)
	}
	if c.InitialLimit < c.MinLimit || c.InitialLimit > c.MaxLimit {
		return c, configError("InitialLimit", "must be in [%d, %d], got %d", c.MinLimit, c.MaxLimit, c.InitialLimit)
	}
	if c.MaxLimitFactor == 0 {
		c.MaxLimitFactor = DefaultMaxLimitFactor
	}
	if math.IsNaN(c.MaxLimitFactor) || c.MaxLimitFactor < 1 || math.IsInf(c.MaxLimitFactor, 0) {
		return c, configError("MaxLimitFactor", "must be a finite number >= 1, got %v", c.MaxLimitFactor)
	}
	if c.WindowMin < 0 || c.WindowMax < 0 {
		return c, configError("WindowMin", "durations must be >= 0, got %v and %v", c.WindowMin, c.WindowMax)
	}
	if c.WindowMin == 0 {
		c.WindowMin = DefaultWindowMin
	}
	if c.WindowMax == 0 {
		c.WindowMax = max(DefaultWindowMax, c.WindowMin)
	}
	if c.WindowMin > c.WindowMax {
		return c, configError("WindowMax", "must be >= WindowMin (%v), got %v", c.WindowMin, c.WindowMax)
	}
	if c.WindowMinSamples == 0 {
		c.WindowMinSamples = DefaultWindowMinSamples
	}
	if c.Quantile == 0 {
		c.Quantile = DefaultQuantile
	}
	if math.IsNaN(c.Quantile) || c.Quantile <= 0 || c.Quantile >= 1 {
		return c, configError("Quantile", "must be in (0, 1), got %v", c.Quantile)
	}
	if c.BaselineAge == 0 {
		c.BaselineAge = DefaultBaselineAge
	}
	if c.CorrelationWindow == 0 {
		c.CorrelationWindow = DefaultCorrelationWindow
	}
	if c.Drops > DropsDrop {
		return c, configError("Drops", "unknown value %d", c.Drops)
	}
	return c, nil
}

// Stats counts how the mirror of shed's in-flight work in failsafe-go's
// semaphore went. Both counts are zero when shed and failsafe-go agree, as
// they should.
type Stats struct {
	// Refused counts admissions by shed for which failsafe-go's semaphore
	// had no permit (they are then invisible to failsafe-go).
	Refused uint64
	// Orphans counts releases that found no failsafe-go permit to return.
	Orphans uint64
	// Held is the number of failsafe-go permits held now (shed's work in
	// flight, as failsafe-go sees it).
	Held int
}

// Source is a shed.LimitSource backed by failsafe-go's adaptive limiter,
// driven in virtual time. Build one per shed.Limiter with New, set it as
// Config.Source and wrap Config.Observer with Source.Observer. It is meant
// for the explicit-time API (shed's ...At methods), where every event
// carries its time.
type Source struct {
	al    adaptivelimiter.AdaptiveLimiter[any]
	drops Drops

	mu     sync.Mutex
	clk    virtualClock
	clkVal reflect.Value // &clk, as the permit's clock interface type
	base   time.Time     // failsafe-go time of the virtual origin
	origin time.Time     // the first virtual time seen
	held   []adaptivelimiter.Permit
	stats  Stats
}

// virtualClock satisfies failsafe-go's internal Clock interface
// (Now() time.Time).
type virtualClock struct{ now time.Time }

func (c *virtualClock) Now() time.Time { return c.now }

// New builds a failsafe-go adaptive limiter configured by cfg.
func New(cfg Config) (*Source, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	lay, err := permitLayout()
	if err != nil {
		return nil, err
	}
	al := adaptivelimiter.NewBuilder[any]().
		WithLimits(cfg.MinLimit, cfg.MaxLimit, cfg.InitialLimit).
		WithMaxLimitFactor(cfg.MaxLimitFactor).
		WithRecentWindow(cfg.WindowMin, cfg.WindowMax, cfg.WindowMinSamples).
		WithRecentQuantile(cfg.Quantile).
		WithBaselineWindow(cfg.BaselineAge).
		WithCorrelationWindow(cfg.CorrelationWindow).
		Build()
	s := &Source{al: al, drops: cfg.Drops}
	// Build anchored the first window at the wall clock's now; virtual
	// instants are mapped from one second after it, so that they all come
	// after it, and every decision depends only on virtual differences.
	s.base = time.Now().Add(time.Second)
	s.clkVal = reflect.New(lay.clockType).Elem()
	s.clkVal.Set(reflect.ValueOf(&s.clk))
	return s, nil
}

// Limit returns failsafe-go's current limit.
func (s *Source) Limit() int { return max(s.al.Limit(), 1) }

// Observe records a finished unit of work (a timed success or a drop),
// returning one of the failsafe-go permits taken at admission.
func (s *Source) Observe(sm shed.Sample) {
	record := sm.Timed && (!sm.Dropped || s.drops == DropsRecord)
	start := sm.Now
	if sm.Timed {
		start = sm.Now.Add(-sm.Latency)
	}
	s.release(sm.Now, start, sm.InFlight, record)
}

// Observer returns a shed.Observer that mirrors admissions into
// failsafe-go's semaphore and returns the permits of the releases that
// Observe does not see (ignored outcomes, untimed successes, leaks); it
// then passes every event to next, which may be nil.
func (s *Source) Observer(next shed.Observer) shed.Observer {
	return shed.ObserverFunc(func(e shed.Event) {
		switch e.Kind {
		case shed.EventAdmitted:
			s.admit(e.Time)
		case shed.EventReleased:
			if e.Outcome == shed.Ignored || (e.Outcome == shed.Success && !e.Timed) {
				s.release(e.Time, e.Time, 0, false)
			}
		case shed.EventLeaked:
			s.release(e.Time, e.Time, 0, false)
		}
		if next != nil {
			next.Observe(e)
		}
	})
}

// Stats returns the mirror's counters.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Held = len(s.held)
	return st
}

// MaxInflight returns failsafe-go's largest in-flight count of the last
// window (its Metrics.MaxInflight).
func (s *Source) MaxInflight() int { return s.al.MaxInflight() }

func (s *Source) admit(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.note(now)
	p, ok := s.al.TryAcquirePermit()
	if !ok {
		s.stats.Refused++
		return
	}
	s.held = append(s.held, p)
}

// note makes the first virtual instant seen the origin.
func (s *Source) note(now time.Time) {
	if s.origin.IsZero() && !now.IsZero() {
		s.origin = now
	}
}

// at maps a virtual instant onto failsafe-go's time line.
func (s *Source) at(v time.Time) time.Time {
	if v.IsZero() {
		return s.clk.now // untimed event: the last instant seen
	}
	return s.base.Add(v.Sub(s.origin))
}

// release returns a failsafe-go permit: all of them are alike until their
// start time, in-flight count and clock are written, which happens here.
func (s *Source) release(now, start time.Time, inflight int, record bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.note(start)
	s.note(now)
	n := len(s.held)
	if n == 0 {
		s.stats.Orphans++
		return
	}
	p := s.held[n-1]
	s.held[n-1] = nil
	s.held = s.held[:n-1]
	s.clk.now = s.at(now)
	if inflight <= 0 {
		inflight = s.al.Inflight()
	}
	lay, _ := permitLayout()
	lay.write(p, s.clkVal, s.at(start), inflight)
	if record {
		p.Record()
	} else {
		p.Drop()
	}
}

// layout locates the unexported fields of failsafe-go's permit.
type layout struct {
	typ       reflect.Type // *recordingPermit[any]
	clockType reflect.Type
	clock     uintptr
	startTime uintptr
	inflight  uintptr
}

var permitLayout = sync.OnceValues(func() (layout, error) {
	probe := adaptivelimiter.NewBuilder[any]().Build()
	p, ok := probe.TryAcquirePermit()
	if !ok {
		return layout{}, ErrUnsupportedVersion
	}
	defer p.Drop()
	t := reflect.TypeOf(p)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return layout{}, ErrUnsupportedVersion
	}
	lay := layout{typ: t}
	st := t.Elem()
	clock, ok1 := st.FieldByName("clock")
	start, ok2 := st.FieldByName("startTime")
	infl, ok3 := st.FieldByName("currentInflight")
	if !ok1 || !ok2 || !ok3 ||
		clock.Type.Kind() != reflect.Interface || clock.Type.NumMethod() != 1 ||
		!reflect.TypeFor[*virtualClock]().Implements(clock.Type) ||
		start.Type != reflect.TypeFor[time.Time]() ||
		infl.Type != reflect.TypeFor[int]() ||
		len(clock.Index) != 1 || len(start.Index) != 1 || len(infl.Index) != 1 {
		return layout{}, ErrUnsupportedVersion
	}
	lay.clockType, lay.clock, lay.startTime, lay.inflight = clock.Type, clock.Offset, start.Offset, infl.Offset
	return lay, nil
})

// write sets the permit's clock, start time and in-flight count.
func (l layout) write(p adaptivelimiter.Permit, clk reflect.Value, start time.Time, inflight int) {
	v := reflect.ValueOf(p)
	if v.Type() != l.typ {
		panic(fmt.Sprintf("failsafesim: unexpected permit type %v", v.Type())) // cannot happen: one failsafe-go version per build
	}
	ptr := v.UnsafePointer()
	reflect.NewAt(l.clockType, unsafe.Add(ptr, l.clock)).Elem().Set(clk)
	*(*time.Time)(unsafe.Add(ptr, l.startTime)) = start
	*(*int)(unsafe.Add(ptr, l.inflight)) = inflight
}

package sim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/limits/gcl"
	"github.com/shedkit/shedkit/shed"
)

// Policy builds the admission control of one replica: a shed.Limiter and
// the LimitSource that drives it. Implement it to compare another
// algorithm (for example failsafe-go's adaptive limiter, from a separate
// module) with the built-in ones; [RegisterPolicy] makes it known to
// [ParsePolicy] and shedsim.
type Policy interface {
	// Name identifies the policy in tables, series and file names.
	Name() string
	// NewLimiter builds the limiter of one replica from env.Config, which
	// carries the scenario's classes, queues, cost budget and the virtual
	// clock: set its Limit or Source and keep the rest. The source is
	// returned for reporting; it may be nil (a static limit).
	NewLimiter(env PolicyEnv) (*shed.Limiter, shed.LimitSource, error)
}

// PolicyEnv is what a Policy gets to build one replica's limiter.
type PolicyEnv struct {
	// Scenario is the normalized scenario (defaults filled in). Read only.
	Scenario *Scenario
	// Replica is the replica's index.
	Replica int
	// Config is the limiter configuration derived from the scenario,
	// without Limit or Source. Config.Clock returns the virtual start
	// time, so that limiter epochs are the same in every run.
	Config shed.Config
	// Seed is a seed for a policy that needs randomness, derived from the
	// run's seed and the replica, stable across runs.
	Seed uint64
	// Trace, when set, receives every window of the replica's adaptive
	// limit (shedkit-gradient and shedkit-aimd; other policies have no
	// window to show). See TracePolicy.
	Trace func(limits.WindowTrace)
}

// PolicyFunc adapts a function to a Policy.
func PolicyFunc(name string, f func(env PolicyEnv) (*shed.Limiter, shed.LimitSource, error)) Policy {
	return funcPolicy{name, f}
}

type funcPolicy struct {
	name string
	f    func(env PolicyEnv) (*shed.Limiter, shed.LimitSource, error)
}

func (p funcPolicy) Name() string { return p.name }
func (p funcPolicy) NewLimiter(env PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
	return p.f(env)
}

// PolicyFactory builds a policy from the parameters of a spec such as
// "shedkit-gradient:tolerance=2,smoothing=0.3" (nil for none).
type PolicyFactory func(params map[string]string) (Policy, error)

type registered struct {
	factory PolicyFactory
	doc     string
	params  []string
}

var (
	registryMu sync.RWMutex
	registry   = map[string]registered{}
	order      []string
)

// RegisterPolicy makes a policy known to ParsePolicy and shedsim under
// name. doc is one line for -h; params lists the parameter names the
// factory accepts. Registering a name twice replaces it.
func RegisterPolicy(name, doc string, params []string, f PolicyFactory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, ok := registry[name]; !ok {
		order = append(order, name)
	}
	registry[name] = registered{f, doc, params}
}

// PolicyNames returns the registered policy names in registration order:
// the built-in ones first.
func PolicyNames() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return slices.Clone(order)
}

// PolicyDoc returns the one-line description and parameter names of a
// registered policy.
func PolicyDoc(name string) (doc string, params []string, ok bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	r, ok := registry[name]
	return r.doc, r.params, ok
}

// defaultPolicies returns the set compared when nothing else is asked: no
// limit, a static limit at the upstream's capacity, shedkit's Gradient
// and AIMD, and go-concurrency-limits' Gradient2, Vegas and AIMD. The
// slice is a copy.
func DefaultPolicies() []string { return slices.Clone(defaultPolicies) }

var defaultPolicies = []string{"none", "static", "shedkit-gradient", "shedkit-aimd", "gcl-gradient2", "gcl-vegas", "gcl-aimd"}

// ParsePolicy builds a policy from a spec: a registered name, optionally
// followed by ":" and comma-separated key=value parameters. The policy's
// Name is the canonical spec: parameters sorted by key.
func ParsePolicy(spec string) (Policy, error) {
	name, rest, _ := strings.Cut(strings.TrimSpace(spec), ":")
	registryMu.RLock()
	r, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown policy %q (known: %s)", name, strings.Join(PolicyNames(), ", "))
	}
	params := map[string]string{}
	if rest != "" {
		for _, kv := range strings.Split(rest, ",") {
			k, v, ok := strings.Cut(kv, "=")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if !ok || k == "" || v == "" {
				return nil, fmt.Errorf("policy %s: parameter %q is not key=value", name, kv)
			}
			if !slices.Contains(r.params, k) {
				return nil, fmt.Errorf("policy %s: unknown parameter %q (known: %s)", name, k, strings.Join(r.params, ", "))
			}
			if _, dup := params[k]; dup {
				return nil, fmt.Errorf("policy %s: parameter %q given twice", name, k)
			}
			params[k] = v
		}
	}
	return r.factory(params)
}

// CanonicalPolicyName returns the name of a policy with parameters as the
// simulator prints it, name:k=v,... with the keys sorted, so that a policy
// registered from another module names its configurations the same way.
func CanonicalPolicyName(name string, params map[string]string) string {
	if len(params) == 0 {
		return name
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(name)
	for i, k := range keys {
		if i == 0 {
			b.WriteByte(':')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + params[k])
	}
	return b.String()
}

// paramReader parses typed policy parameters and remembers the first error.
type paramReader struct {
	policy string
	p      map[string]string
	err    error
}

func (r *paramReader) fail(k string, err error) {
	if r.err == nil {
		r.err = fmt.Errorf("policy %s: parameter %s: %v", r.policy, k, err)
	}
}

func (r *paramReader) int(k string, dst *int) {
	if v, ok := r.p[k]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			r.fail(k, fmt.Errorf("%q is not an integer", v))
		}
		*dst = n
	}
}

// positive parses an integer >= 1: for limits, where 0 would silently
// mean the default.
func (r *paramReader) positive(k string, dst *int) {
	if v, ok := r.p[k]; ok {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			r.fail(k, fmt.Errorf("%q is not a positive integer", v))
		} else {
			*dst = n
		}
	}
}

func (r *paramReader) float(k string, dst *float64) {
	if v, ok := r.p[k]; ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			r.fail(k, fmt.Errorf("%q is not a finite number", v))
		}
		*dst = f
	}
}

func (r *paramReader) duration(k string, dst *time.Duration) {
	if v, ok := r.p[k]; ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			r.fail(k, fmt.Errorf("%q is not a duration (e.g. 500ms)", v))
		}
		*dst = d
	}
}

func (r *paramReader) window(w *limits.WindowConfig) {
	r.duration("window", &w.MinDuration)
	r.int("min_samples", &w.MinSamples)
	r.float("quantile", &w.Quantile)
}

var windowParams = []string{"window", "min_samples", "quantile"}

// The built-in policies, registered first so that PolicyNames lists them
// before any a program adds.
func init() {
	RegisterPolicy("none", "no admission control: every request is admitted (a limiter with shed.MaxLimit and no cost budget)", nil,
		nonePolicy)
	RegisterPolicy("static", "a fixed limit per replica: limit=N, default service.static_limit or the upstream's capacity", []string{"limit"},
		staticPolicy)
	RegisterPolicy("shedkit-gradient", "shedkit limits.Gradient (defaults of limits.GradientConfig)",
		append([]string{"initial", "min", "max", "tolerance", "significance", "smoothing", "growth", "backoff", "ceiling", "drop_tolerance", "min_utilization", "relearn", "baseline"}, windowParams...),
		gradientPolicy)
	RegisterPolicy("shedkit-aimd", "shedkit limits.AIMD (defaults of limits.AIMDConfig: drops and a latency learned from its baseline; threshold=-1ms for drops only)",
		append([]string{"initial", "min", "max", "increase", "backoff", "threshold", "tolerance", "drop_tolerance", "min_utilization"}, windowParams...),
		aimdPolicy)
	gclPolicy("gcl-gradient2", "go-concurrency-limits Gradient2 through limits/gcl (1 s windows of >= 100 samples, min rtt), default tuning except initial=N (default 20), min=N (20), max=N (200, or initial or min if higher)",
		[]string{"initial", "min", "max"}, gcl.NewGradient2Tuned)
	gclPolicy("gcl-vegas", "go-concurrency-limits Vegas, default tuning except that its probe (drawn from math/rand's global source) is off, so runs are reproducible; initial=N (default 20), max=N (1000, or initial if higher)",
		[]string{"initial", "max"}, newVegas)
	gclPolicy("gcl-aimd", "go-concurrency-limits AIMD through limits/gcl, default tuning; initial=N (default 10), max=N (default none; applied by limits/gcl, as the library's AIMD has none)",
		[]string{"initial", "max"}, gcl.NewAIMDTuned)
}

// nonePolicy admits everything, through a limiter all the same, so that
// the baseline pays the same admission costs as the others.
func nonePolicy(map[string]string) (Policy, error) {
	return PolicyFunc("none", func(env PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
		cfg := env.Config
		cfg.Limit, cfg.MaxCost, cfg.DeadlineMargin = shed.MaxLimit, 0, 0
		l, err := shed.New(cfg)
		return l, nil, err
	}), nil
}

// staticPolicy is a fixed limit; without one it takes the scenario's, or
// else the upstream's capacity, so that it is the well-tuned static
// limit the adaptive ones are compared with.
func staticPolicy(p map[string]string) (Policy, error) {
	r := paramReader{policy: "static", p: p}
	n := 0
	r.int("limit", &n)
	if r.err != nil {
		return nil, r.err
	}
	if n < 0 || n > shed.MaxLimit {
		return nil, fmt.Errorf("policy static: limit must be in [1, %d], got %d", shed.MaxLimit, n)
	}
	return PolicyFunc(CanonicalPolicyName("static", p), func(env PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
		cfg := env.Config
		cfg.Limit = n
		if n == 0 {
			cfg.Limit = env.Scenario.Service.StaticLimit
			if cfg.Limit == 0 {
				cfg.Limit = env.Scenario.Upstream.Capacity
			}
		}
		l, err := shed.New(cfg)
		return l, nil, err
	}), nil
}

// gradientPolicy is shedkit's limits.Gradient, each of whose fields is a
// parameter.
func gradientPolicy(p map[string]string) (Policy, error) {
	r := paramReader{policy: "shedkit-gradient", p: p}
	var c limits.GradientConfig
	r.int("initial", &c.InitialLimit)
	r.int("min", &c.MinLimit)
	r.int("max", &c.MaxLimit)
	r.float("tolerance", &c.Tolerance)
	r.float("significance", &c.Significance)
	r.float("smoothing", &c.Smoothing)
	r.float("growth", &c.Growth)
	r.float("backoff", &c.Backoff)
	r.duration("ceiling", &c.LatencyCeiling)
	r.float("drop_tolerance", &c.DropTolerance)
	r.float("min_utilization", &c.MinUtilization)
	r.int("relearn", &c.RelearnWindows)
	r.int("baseline", &c.BaselineWindows)
	r.window(&c.Window)
	if r.err != nil {
		return nil, r.err
	}
	return checkedSource("shedkit-gradient", p, c, limits.NewGradient,
		func(c limits.GradientConfig, f func(limits.WindowTrace)) limits.GradientConfig { c.Trace = f; return c })
}

// aimdPolicy is shedkit's limits.AIMD, each of whose fields is a
// parameter.
func aimdPolicy(p map[string]string) (Policy, error) {
	r := paramReader{policy: "shedkit-aimd", p: p}
	var c limits.AIMDConfig
	r.int("initial", &c.InitialLimit)
	r.int("min", &c.MinLimit)
	r.int("max", &c.MaxLimit)
	r.int("increase", &c.Increase)
	r.float("backoff", &c.Backoff)
	r.duration("threshold", &c.LatencyThreshold)
	r.float("tolerance", &c.LatencyTolerance)
	r.float("drop_tolerance", &c.DropTolerance)
	r.float("min_utilization", &c.MinUtilization)
	r.window(&c.Window)
	if r.err != nil {
		return nil, r.err
	}
	return checkedSource("shedkit-aimd", p, c, limits.NewAIMD,
		func(c limits.AIMDConfig, f func(limits.WindowTrace)) limits.AIMDConfig { c.Trace = f; return c })
}

// checkedSource returns the policy named name of a source built from c by
// build, after building one, so that a bad parameter fails at parse
// rather than per replica; traced returns c with a replica's trace.
func checkedSource[C any, S shed.LimitSource](name string, p map[string]string, c C, build func(C) (S, error),
	traced func(C, func(limits.WindowTrace)) C) (Policy, error) {
	if _, err := build(c); err != nil {
		return nil, fmt.Errorf("policy %s: %w", name, err)
	}
	return sourcePolicy(CanonicalPolicyName(name, p), func(env PolicyEnv) (shed.LimitSource, error) {
		if env.Trace != nil {
			return build(traced(c, env.Trace))
		}
		return build(c)
	}), nil
}

// gclPolicy registers a go-concurrency-limits algorithm. tuning lists the
// gcl.Tuning parameters it takes (initial, min, max); without them the
// library's default tuning is kept, so that default results do not move.
func gclPolicy(name, doc string, tuning []string, build func(gcl.Config, gcl.Tuning) (*gcl.Source, error)) {
	params := append(append([]string{"rtt"}, tuning...), windowParams...)
	RegisterPolicy(name, doc, params, func(p map[string]string) (Policy, error) {
		r := paramReader{policy: name, p: p}
		var c gcl.Config
		var t gcl.Tuning
		r.window(&c.Window)
		// ParsePolicy rejects the parameters not in tuning.
		r.positive("initial", &t.InitialLimit)
		r.positive("min", &t.MinLimit)
		r.positive("max", &t.MaxLimit)
		switch p["rtt"] {
		case "", "min":
		case "window":
			c.RTT = gcl.RTTWindow
		default:
			r.fail("rtt", fmt.Errorf("%q is not min or window", p["rtt"]))
		}
		if r.err != nil {
			return nil, r.err
		}
		if _, err := build(c, t); err != nil {
			return nil, gclParamError(name, err)
		}
		return sourcePolicy(CanonicalPolicyName(name, p), func(PolicyEnv) (shed.LimitSource, error) { return build(c, t) }), nil
	})
}

// gclParamError names the parameter behind a gcl.Tuning error (which names
// the field), so that the message says what to change in the spec.
func gclParamError(name string, err error) error {
	for _, f := range []struct{ field, param string }{
		{"Tuning.InitialLimit", "initial"}, {"Tuning.MinLimit", "min"}, {"Tuning.MaxLimit", "max"},
	} {
		if strings.Contains(err.Error(), ": "+f.field+": ") {
			return fmt.Errorf("policy %s: parameter %s: %w", name, f.param, err)
		}
	}
	return fmt.Errorf("policy %s: %w", name, err)
}

// newVegas builds go-concurrency-limits' Vegas without its probe: the
// library re-bases its no-load latency every jitter x 30 x limit samples
// with the jitter drawn from math/rand's global source, which would make
// runs irreproducible.
func newVegas(c gcl.Config, t gcl.Tuning) (*gcl.Source, error) {
	t.NoProbe = true
	return gcl.NewVegasTuned(c, t)
}

// sourcePolicy builds a limiter around a fresh LimitSource per replica.
func sourcePolicy(name string, newSource func(PolicyEnv) (shed.LimitSource, error)) Policy {
	return PolicyFunc(name, func(env PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
		src, err := newSource(env)
		if err != nil {
			return nil, nil, err
		}
		cfg := env.Config
		cfg.Source = src
		l, err := shed.New(cfg)
		return l, src, err
	})
}

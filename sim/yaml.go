package sim

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// LoadScenario reads and validates a scenario file (see the package
// documentation for the format). Errors are *FieldError values that name
// the file, line, column and field.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseScenario(path, data)
}

// ParseScenario parses and validates a scenario in YAML; file names the
// source in errors. Unknown fields, duplicate keys, wrong types and
// invalid values are errors.
func ParseScenario(file string, data []byte) (*Scenario, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &FieldError{File: file, Line: yamlErrLine(err), Msg: "malformed YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &FieldError{File: file, Msg: "empty scenario"}
	}
	d := &decoder{file: file, pos: map[string]*yaml.Node{}}
	var sc Scenario
	if err := d.scenario(doc.Content[0], &sc); err != nil {
		return nil, err
	}
	if err := sc.Validate(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.File = file
			if n := d.lookup(fe.Path); n != nil {
				fe.Line, fe.Column = n.Line, n.Column
			}
		}
		return nil, err
	}
	return &sc, nil
}

// yamlErrLine extracts the line of a yaml.v3 syntax error ("yaml: line 3:
// ..."), or 0.
func yamlErrLine(err error) int {
	s := err.Error()
	if i := strings.Index(s, "line "); i >= 0 {
		rest := s[i+5:]
		j := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
		if j > 0 {
			n, _ := strconv.Atoi(rest[:j])
			return n
		}
	}
	return 0
}

type decoder struct {
	file string
	pos  map[string]*yaml.Node // field path -> value node
}

// lookup returns the node of path or of its closest ancestor.
func (d *decoder) lookup(path string) *yaml.Node {
	for path != "" {
		if n, ok := d.pos[path]; ok {
			return n
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return nil
}

func (d *decoder) errf(n *yaml.Node, path, format string, args ...any) error {
	e := &FieldError{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

type fieldFunc func(n *yaml.Node, path string) error

// mapping decodes a mapping node field by field; unknown and duplicate
// keys are errors.
func (d *decoder) mapping(n *yaml.Node, path string, fields map[string]fieldFunc) error {
	if n.Kind != yaml.MappingNode {
		return d.errf(n, path, "want a mapping (key: value lines), got %s", kindName(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		f, ok := fields[k.Value]
		if !ok {
			known := make([]string, 0, len(fields))
			for name := range fields {
				known = append(known, name)
			}
			slices.Sort(known)
			return d.errf(k, p, "unknown field %q (known: %s)", k.Value, strings.Join(known, ", "))
		}
		if seen[k.Value] {
			return d.errf(k, p, "field given twice")
		}
		seen[k.Value] = true
		d.pos[p] = v
		if err := f(v, p); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) sequence(n *yaml.Node, path string, each func(n *yaml.Node, path string) error) error {
	if n.Kind != yaml.SequenceNode {
		return d.errf(n, path, "want a list, got %s", kindName(n))
	}
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.pos[p] = item
		if err := each(item, p); err != nil {
			return err
		}
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return fmt.Sprintf("%q", n.Value)
}

func (d *decoder) scalar(n *yaml.Node, path, want string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", d.errf(n, path, "want %s, got %s", want, kindName(n))
	}
	return n.Value, nil
}

func (d *decoder) str(dst *string) fieldFunc {
	return func(n *yaml.Node, p string) error {
		v, err := d.scalar(n, p, "a string")
		*dst = v
		return err
	}
}

func (d *decoder) strList(dst *[]string) fieldFunc {
	return func(n *yaml.Node, p string) error {
		return d.sequence(n, p, func(n *yaml.Node, p string) error {
			v, err := d.scalar(n, p, "a string")
			*dst = append(*dst, v)
			return err
		})
	}
}

func (d *decoder) boolean(dst *bool) fieldFunc {
	return func(n *yaml.Node, p string) error {
		v, err := d.scalar(n, p, "true or false")
		if err != nil {
			return err
		}
		switch v {
		case "true":
			*dst = true
		case "false":
			*dst = false
		default:
			return d.errf(n, p, "want true or false, got %q", v)
		}
		return nil
	}
}

func parseFloat(v string) (float64, error) {
	switch strings.ToLower(v) {
	case ".inf", "+.inf", "inf", "+inf":
		return math.Inf(1), nil
	case "-.inf", "-inf":
		return math.Inf(-1), nil
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(v, "_", ""), 64)
	if err != nil || math.IsNaN(f) {
		return 0, fmt.Errorf("want a number, got %q", v)
	}
	return f, nil
}

func (d *decoder) float(dst *float64) fieldFunc {
	return func(n *yaml.Node, p string) error {
		v, err := d.scalar(n, p, "a number")
		if err != nil {
			return err
		}
		f, err := parseFloat(v)
		if err != nil || math.IsInf(f, 0) {
			return d.errf(n, p, "want a finite number, got %q", v)
		}
		*dst = f
		return nil
	}
}

func (d *decoder) integer(dst *int) fieldFunc {
	return func(n *yaml.Node, p string) error {
		i, err := d.parseInt(n, p, math.MinInt32, math.MaxInt32)
		*dst = int(i)
		return err
	}
}

func (d *decoder) int64v(dst *int64) fieldFunc {
	return func(n *yaml.Node, p string) error {
		i, err := d.parseInt(n, p, math.MinInt64, math.MaxInt64)
		*dst = i
		return err
	}
}

// parseInt reads an integer scalar (underscores allowed) in [lo, hi].
func (d *decoder) parseInt(n *yaml.Node, p string, lo, hi int64) (int64, error) {
	v, err := d.scalar(n, p, "an integer")
	if err != nil {
		return 0, err
	}
	i, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 10, 64)
	if err != nil || i > hi || i < lo {
		return 0, d.errf(n, p, "want an integer, got %q", v)
	}
	return i, nil
}

func (d *decoder) duration(dst *time.Duration) fieldFunc {
	return func(n *yaml.Node, p string) error {
		v, err := d.scalar(n, p, "a duration")
		if err != nil {
			return err
		}
		t, err := time.ParseDuration(v)
		if err != nil {
			return d.errf(n, p, "want a duration such as 250ms, 1.5s or 2m, got %q", v)
		}
		*dst = t
		return nil
	}
}

// dist decodes a distribution: a scalar (a constant) or a mapping with
// dist and its parameters. Durations when isTime, plain numbers otherwise.
func (d *decoder) dist(dst *Dist, isTime bool) fieldFunc {
	return func(n *yaml.Node, p string) error {
		if n.Kind == yaml.ScalarNode {
			v, err := d.distValue(n, p, isTime)
			*dst = Const(v)
			return err
		}
		var dp distParams
		if err := d.mapping(n, p, d.distFields(&dp, isTime)); err != nil {
			return err
		}
		names, err := d.distNames(n, p, &dp)
		if err != nil {
			return err
		}
		out, err := d.buildDist(n, p, &dp, names)
		if err != nil {
			return err
		}
		if dp.cmin != nil {
			out.ClampMin = *dp.cmin
		}
		if dp.cmax != nil {
			out.ClampMax = *dp.cmax
		}
		*dst = out
		return nil
	}
}

// distValue decodes a value of a distribution (a constant, a mean, a
// bound...): a duration when isTime, so that times read as times in a
// scenario, and a finite number otherwise.
func (d *decoder) distValue(n *yaml.Node, p string, isTime bool) (float64, error) {
	v, err := d.scalar(n, p, "a value")
	if err != nil {
		return 0, err
	}
	if isTime {
		t, err := time.ParseDuration(v)
		if err != nil {
			return 0, d.errf(n, p, "want a duration such as 50ms, got %q", v)
		}
		return float64(t), nil
	}
	f, err := parseFloat(v)
	if err != nil || math.IsInf(f, 0) {
		return 0, d.errf(n, p, "want a finite number, got %q", v)
	}
	return f, nil
}

// distParams are the fields of a distribution mapping. A parameter is nil
// when not given: which ones were given decides what is missing or out of
// place.
type distParams struct {
	kind string

	median, mean, value, lo, hi, cmin, cmax, sigma, alpha, ratio, share *float64
}

// distFields decodes the fields of a distribution into dp. The shape
// parameters (sigma, alpha, ratio, share) are plain numbers whatever the
// distribution's unit.
func (d *decoder) distFields(dp *distParams, isTime bool) map[string]fieldFunc {
	param := func(dst **float64, isNum bool) fieldFunc {
		return func(n *yaml.Node, p string) error {
			var v float64
			var err error
			if isNum {
				err = d.float(&v)(n, p)
			} else {
				v, err = d.distValue(n, p, isTime)
			}
			*dst = &v
			return err
		}
	}
	return map[string]fieldFunc{
		"dist": d.str(&dp.kind), "value": param(&dp.value, false), "mean": param(&dp.mean, false),
		"median": param(&dp.median, false), "sigma": param(&dp.sigma, true),
		"min": param(&dp.lo, false), "max": param(&dp.hi, false),
		"clamp_min": param(&dp.cmin, false), "clamp_max": param(&dp.cmax, false),
		"alpha": param(&dp.alpha, true), "ratio": param(&dp.ratio, true), "share": param(&dp.share, true),
	}
}

// distNames returns the parameters the distribution dp.kind takes, after
// checking that it is one and that no parameter of another one was given:
// a stray parameter is a mistake to report rather than to ignore.
func (d *decoder) distNames(n *yaml.Node, p string, dp *distParams) ([]string, error) {
	allowed := map[string][]string{
		"constant":    {"value"},
		"exponential": {"mean"},
		"lognormal":   {"median", "mean", "sigma"},
		"uniform":     {"min", "max"},
		"pareto":      {"median", "alpha"},
		"bimodal":     {"median", "sigma", "ratio", "share"},
	}
	names, ok := allowed[dp.kind]
	switch {
	case dp.kind == "" && d.pos[p+".dist"] == nil:
		return nil, d.errf(n, p+".dist", "a distribution needs dist: constant, exponential, lognormal, uniform, pareto or bimodal")
	case !ok:
		return nil, d.errf(d.pos[p+".dist"], p+".dist", "want one of constant, exponential, lognormal, uniform, pareto, bimodal, got %q", dp.kind)
	}
	given := map[string]*float64{"value": dp.value, "mean": dp.mean, "median": dp.median, "sigma": dp.sigma, "min": dp.lo, "max": dp.hi,
		"alpha": dp.alpha, "ratio": dp.ratio, "share": dp.share}
	for name, v := range given {
		if v != nil && !slices.Contains(names, name) {
			return nil, d.errf(d.pos[p+"."+name], p+"."+name, "not a parameter of a %s distribution (it takes %s)", dp.kind, strings.Join(names, ", "))
		}
	}
	return names, nil
}

// buildDist builds the distribution dp describes, once its kind and
// parameters are known to fit (see distNames); it reports what is
// missing.
func (d *decoder) buildDist(n *yaml.Node, p string, dp *distParams, names []string) (Dist, error) {
	need := func(name string, v *float64) error {
		if v == nil {
			return d.errf(n, p+"."+name, "a %s distribution needs %s", dp.kind, name)
		}
		return nil
	}
	var out Dist
	switch dp.kind {
	case "constant":
		if err := need("value", dp.value); err != nil {
			return out, err
		}
		out = Const(*dp.value)
	case "exponential":
		if err := need("mean", dp.mean); err != nil {
			return out, err
		}
		out = Exp(*dp.mean)
	case "lognormal":
		if err := need("sigma", dp.sigma); err != nil {
			return out, err
		}
		switch {
		case dp.median != nil && dp.mean != nil:
			return out, d.errf(n, p, "give median or mean, not both")
		case dp.median != nil:
			out = LogNorm(*dp.median, *dp.sigma)
		case dp.mean != nil:
			out = LogNorm(*dp.mean/math.Exp(*dp.sigma**dp.sigma/2), *dp.sigma)
		default:
			return out, d.errf(n, p+".median", "a lognormal distribution needs median (or mean)")
		}
	case "uniform":
		if err := need("min", dp.lo); err != nil {
			return out, err
		}
		if err := need("max", dp.hi); err != nil {
			return out, err
		}
		out = Unif(*dp.lo, *dp.hi)
	case "pareto", "bimodal":
		out = Dist{Kind: Pareto}
		if dp.kind == "bimodal" {
			out.Kind = Bimodal
		}
		for _, f := range []struct {
			name string
			v    *float64
			dst  *float64
		}{{"median", dp.median, &out.Median}, {"alpha", dp.alpha, &out.Alpha}, {"sigma", dp.sigma, &out.Sigma}, {"ratio", dp.ratio, &out.Ratio}, {"share", dp.share, &out.Share}} {
			if !slices.Contains(names, f.name) {
				continue
			}
			if err := need(f.name, f.v); err != nil {
				return out, err
			}
			*f.dst = *f.v
		}
	}
	return out, nil
}

func (d *decoder) retry(r *Retry) fieldFunc {
	return func(n *yaml.Node, p string) error {
		return d.mapping(n, p, map[string]fieldFunc{
			"max_attempts":      d.integer(&r.MaxAttempts),
			"backoff":           d.duration(&r.Backoff),
			"max_backoff":       d.duration(&r.MaxBackoff),
			"honor_no_retry":    d.boolean(&r.HonorNoRetry),
			"honor_retry_after": d.boolean(&r.HonorRetryAfter),
			"budget": func(n *yaml.Node, p string) error {
				r.Budget = &Budget{}
				return d.mapping(n, p, map[string]fieldFunc{
					"ratio": d.float(&r.Budget.Ratio), "min_per_second": d.float(&r.Budget.MinPerSecond), "ttl": d.duration(&r.Budget.TTL),
				})
			},
			"throttle": func(n *yaml.Node, p string) error {
				r.Throttle = &Throttle{}
				return d.mapping(n, p, map[string]fieldFunc{"k": d.float(&r.Throttle.K), "window": d.duration(&r.Throttle.Window)})
			},
		})
	}
}

func (d *decoder) class(c *Class) fieldFunc {
	return func(n *yaml.Node, p string) error {
		return d.mapping(n, p, map[string]fieldFunc{
			"name": d.str(&c.Name),
			"rate": d.float(&c.Rate),
			"schedule": func(n *yaml.Node, p string) error {
				return d.sequence(n, p, func(n *yaml.Node, p string) error {
					var ch RateChange
					err := d.mapping(n, p, map[string]fieldFunc{
						"at": d.duration(&ch.At), "rate": d.float(&ch.Rate), "factor": d.float(&ch.Factor),
						"ramp": d.duration(&ch.Ramp), "for": d.duration(&ch.For),
					})
					if err == nil {
						_, hasRate := d.pos[p+".rate"]
						_, hasFactor := d.pos[p+".factor"]
						if hasRate == hasFactor {
							return d.errf(n, p, "a change sets exactly one of rate and factor")
						}
						if hasFactor && ch.Factor <= 0 {
							return d.errf(d.pos[p+".factor"], p+".factor", "must be > 0 (use rate: 0 for no arrivals)")
						}
					}
					c.Schedule = append(c.Schedule, ch)
					return err
				})
			},
			"users":           d.integer(&c.Users),
			"think":           d.dist(&c.Think, true),
			"cost":            d.dist(&c.Cost, false),
			"actual":          d.dist(&c.Actual, false),
			"timeout":         d.duration(&c.Timeout),
			"attempt_timeout": d.duration(&c.AttemptTimeout),
			"retry":           d.retry(&c.Retry),
			"protected":       d.float(&c.Protected),
			"queue":           d.integer(&c.Queue),
			"max_wait":        d.duration(&c.MaxWait),
			"lifo":            d.boolean(&c.LIFO),
			"rate_limit": func(n *yaml.Node, p string) error {
				c.RateLimit = &RateLimit{}
				return d.mapping(n, p, map[string]fieldFunc{"rps": d.float(&c.RateLimit.RPS), "burst": d.integer(&c.RateLimit.Burst),
					"shared": d.boolean(&c.RateLimit.Shared)})
			},
			"key_concurrency": func(n *yaml.Node, p string) error {
				c.KeyConcurrency = &KeyConcurrency{}
				return d.mapping(n, p, map[string]fieldFunc{"limit": d.integer(&c.KeyConcurrency.Limit), "shared": d.boolean(&c.KeyConcurrency.Shared)})
			},
			"keys": func(n *yaml.Node, p string) error {
				c.Keys = &Keys{}
				return d.mapping(n, p, map[string]fieldFunc{"count": d.integer(&c.Keys.Count), "zipf": d.float(&c.Keys.Zipf),
					"source": d.str(&c.Keys.Source),
					"surge": func(n *yaml.Node, p string) error {
						s := &KeySurge{}
						c.Keys.Surge = s
						return d.mapping(n, p, map[string]fieldFunc{"at": d.duration(&s.At), "for": d.duration(&s.For), "factor": d.float(&s.Factor)})
					}})
			},
		})
	}
}

// scenario decodes the top level of a scenario file.
func (d *decoder) scenario(n *yaml.Node, sc *Scenario) error {
	return d.mapping(n, "", map[string]fieldFunc{
		"name":        d.str(&sc.Name),
		"description": d.str(&sc.Description),
		"duration":    d.duration(&sc.Duration),
		"interval":    d.duration(&sc.Interval),
		"warmup":      d.duration(&sc.Warmup),
		"sustain":     d.duration(&sc.Sustain),
		"trigger": func(n *yaml.Node, p string) error {
			sc.Trigger = &Span{}
			return d.mapping(n, p, map[string]fieldFunc{"at": d.duration(&sc.Trigger.At), "for": d.duration(&sc.Trigger.For)})
		},
		"classes": func(n *yaml.Node, p string) error {
			return d.sequence(n, p, func(n *yaml.Node, p string) error {
				sc.Classes = append(sc.Classes, Class{})
				return d.class(&sc.Classes[len(sc.Classes)-1])(n, p)
			})
		},
		"gateway": func(n *yaml.Node, p string) error {
			sc.Gateway = &Gateway{}
			return d.mapping(n, p, map[string]fieldFunc{"timeout": d.duration(&sc.Gateway.Timeout), "retry": d.retry(&sc.Gateway.Retry)})
		},
		"service":  d.service(&sc.Service),
		"upstream": d.upstream(&sc.Upstream),
		"policies": d.strList(&sc.Policies),
		"expect":   d.expect(&sc.Expect),
	})
}

// service decodes the service section: the replicas and the limiter and
// retries each of them runs.
func (d *decoder) service(s *Service) fieldFunc {
	return func(n *yaml.Node, p string) error {
		return d.mapping(n, p, map[string]fieldFunc{
			"replicas":     d.integer(&s.Replicas),
			"balancer":     choice(d, "a balancer", balancerNames[:], &s.Balancer),
			"max_cost":     d.int64v(&s.MaxCost),
			"static_limit": d.integer(&s.StaticLimit),
			"strict":       d.boolean(&s.Strict),
			"max_queue":    d.integer(&s.MaxQueue),
			"demand_hold":  d.duration(&s.DemandHold),
			"timeout":      d.duration(&s.Timeout),
			"retry":        d.retry(&s.Retry),

			"no_deadline_propagation": d.boolean(&s.NoDeadlinePropagation),
			"cancel_at_deadline":      d.boolean(&s.CancelAtDeadline),
			"deadline_margin":         d.float(&s.DeadlineMargin),
			"store_outages": func(n *yaml.Node, p string) error {
				return d.sequence(n, p, func(n *yaml.Node, p string) error {
					var o Span
					err := d.mapping(n, p, map[string]fieldFunc{"at": d.duration(&o.At), "for": d.duration(&o.For)})
					s.StoreOutages = append(s.StoreOutages, o)
					return err
				})
			},
			"store": func(n *yaml.Node, p string) error {
				m := &StoreModel{}
				s.Store = m
				return d.mapping(n, p, map[string]fieldFunc{
					"latency": d.dist(&m.Latency, true), "timeout": d.duration(&m.Timeout),
					"breaker_failures": d.integer(&m.BreakerFailures), "breaker_open": d.duration(&m.BreakerOpen),
					"lease_ttl": d.duration(&m.LeaseTTL), "restarts": d.boolean(&m.Restarts),
				})
			},
		})
	}
}

// upstream decodes the upstream section: the shared capacity behind the
// replicas and the events that change it during the run.
func (d *decoder) upstream(u *Upstream) fieldFunc {
	return func(n *yaml.Node, p string) error {
		return d.mapping(n, p, map[string]fieldFunc{
			"capacity":        d.integer(&u.Capacity),
			"discipline":      choice(d, "a discipline", disciplineNames[:], &u.Discipline),
			"max_in_flight":   d.integer(&u.MaxInFlight),
			"service_time":    d.dist(&u.ServiceTime, true),
			"degradation":     d.float(&u.Degradation),
			"max_degradation": d.float(&u.MaxDegradation),
			"cost_scaling":    d.float(&u.CostScaling),
			"cost_ref":        d.float(&u.CostRef),
			"shared":          d.boolean(&u.Shared),
			"abandon":         d.boolean(&u.Abandon),
			"events": func(n *yaml.Node, p string) error {
				return d.sequence(n, p, func(n *yaml.Node, p string) error {
					var ev UpstreamEvent
					err := d.mapping(n, p, map[string]fieldFunc{
						"at": d.duration(&ev.At), "for": d.duration(&ev.For), "slowdown": d.float(&ev.Slowdown),
						"errors": d.float(&ev.Errors), "capacity": d.float(&ev.Capacity), "replicas": d.integer(&ev.Replicas),
					})
					u.Events = append(u.Events, ev)
					return err
				})
			},
		})
	}
}

// choice decodes one of names into its index, so that an enumerated
// field lists its values when given another.
func choice[T ~uint8](d *decoder, want string, names []string, dst *T) fieldFunc {
	return func(n *yaml.Node, p string) error {
		v, err := d.scalar(n, p, want)
		if err != nil {
			return err
		}
		i := slices.Index(names, v)
		if i < 0 {
			return d.errf(n, p, "want one of %s, got %q", strings.Join(names, ", "), v)
		}
		*dst = T(i)
		return nil
	}
}

// expect decodes the expectations; a bound left out is infinite, so that
// an expectation may bound one side only.
func (d *decoder) expect(dst *[]Expect) fieldFunc {
	return func(n *yaml.Node, p string) error {
		return d.sequence(n, p, func(n *yaml.Node, p string) error {
			x := Expect{Min: math.Inf(-1), Max: math.Inf(1)}
			err := d.mapping(n, p, map[string]fieldFunc{
				"policy": d.str(&x.Policy), "metric": d.str(&x.Metric), "min": d.bound(&x.Min), "max": d.bound(&x.Max),
			})
			*dst = append(*dst, x)
			return err
		})
	}
}

// bound decodes a bound of an expectation: a number, or a duration read
// in seconds, so that a latency bound can be written as one.
func (d *decoder) bound(dst *float64) fieldFunc {
	return func(n *yaml.Node, p string) error {
		v, err := d.scalar(n, p, "a number or a duration")
		if err != nil {
			return err
		}
		if t, err := time.ParseDuration(v); err == nil && strings.ContainsAny(v, "smhµun") {
			*dst = t.Seconds()
			return nil
		}
		f, err := parseFloat(v)
		if err != nil {
			return d.errf(n, p, "want a number or a duration, got %q", v)
		}
		*dst = f
		return nil
	}
}

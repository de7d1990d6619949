package sim

import (
	"bytes"
	"math"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// MarshalScenario writes sc in the scenario file format (see the package
// documentation), after validating it: ParseScenario reads it back to an
// equal Scenario. Zero fields are left out, so that defaults stay
// defaults. Parameters of time distributions are written as durations,
// to the nanosecond.
func MarshalScenario(sc *Scenario) ([]byte, error) {
	if sc == nil {
		return nil, fieldErr("", "nil scenario")
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2) // as in the package documentation and the suite's files
	if err := enc.Encode(scenarioNode(sc)); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ynode builds a YAML mapping, skipping fields whose value is zero.
type ynode struct{ n *yaml.Node }

func newMap(flow bool) ynode {
	n := &yaml.Node{Kind: yaml.MappingNode}
	if flow {
		n.Style = yaml.FlowStyle
	}
	return ynode{n}
}

func (m ynode) node(key string, v *yaml.Node) {
	if v != nil {
		m.n.Content = append(m.n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, v)
	}
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

// str is a string node that the encoder quotes when it would read back as
// something else (true, 1.5, null).
func (m ynode) str(key, v string) {
	if v != "" {
		m.node(key, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v})
	}
}

func (m ynode) dur(key string, d time.Duration) {
	if d != 0 {
		m.node(key, scalar(d.String()))
	}
}

func (m ynode) num(key string, f float64) {
	if f != 0 {
		m.node(key, scalar(formatNum(f)))
	}
}

func (m ynode) integer(key string, i int64) {
	if i != 0 {
		m.node(key, scalar(strconv.FormatInt(i, 10)))
	}
}

func (m ynode) boolean(key string, b bool) {
	if b {
		m.node(key, scalar("true"))
	}
}

// formatNum writes f exactly (the shortest form that reads back to it),
// without an exponent for the magnitudes scenarios use.
func formatNum(f float64) string {
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e15) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// durNum writes a time in nanoseconds as a duration.
func durNum(f float64) string { return time.Duration(math.Round(f)).String() }

func scenarioNode(sc *Scenario) *yaml.Node {
	m := newMap(false)
	m.str("name", sc.Name)
	m.str("description", sc.Description)
	m.dur("duration", sc.Duration)
	m.dur("interval", sc.Interval)
	m.dur("warmup", sc.Warmup)
	m.dur("sustain", sc.Sustain)
	if t := sc.Trigger; t != nil {
		m.node("trigger", spanNode(*t))
	}
	classes := &yaml.Node{Kind: yaml.SequenceNode}
	for i := range sc.Classes {
		classes.Content = append(classes.Content, classNode(&sc.Classes[i]))
	}
	m.node("classes", classes)
	if g := sc.Gateway; g != nil {
		gm := newMap(false)
		gm.dur("timeout", g.Timeout)
		gm.node("retry", retryNode(&g.Retry))
		m.node("gateway", gm.n)
	}
	m.node("service", serviceNode(&sc.Service))
	m.node("upstream", upstreamNode(&sc.Upstream))
	if len(sc.Policies) > 0 {
		ps := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, p := range sc.Policies {
			ps.Content = append(ps.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: p})
		}
		m.node("policies", ps)
	}
	if len(sc.Expect) > 0 {
		ex := &yaml.Node{Kind: yaml.SequenceNode}
		for _, e := range sc.Expect {
			em := newMap(true)
			em.str("policy", e.Policy)
			em.str("metric", e.Metric)
			if !math.IsInf(e.Min, 0) {
				em.node("min", scalar(formatNum(e.Min)))
			}
			if !math.IsInf(e.Max, 0) {
				em.node("max", scalar(formatNum(e.Max)))
			}
			ex.Content = append(ex.Content, em.n)
		}
		m.node("expect", ex)
	}
	return m.n
}

func classNode(c *Class) *yaml.Node {
	m := newMap(false)
	m.str("name", c.Name)
	if c.Users == 0 {
		m.node("rate", scalar(formatNum(c.Rate)))
	}
	if len(c.Schedule) > 0 {
		s := &yaml.Node{Kind: yaml.SequenceNode}
		for _, ch := range c.Schedule {
			cm := newMap(true)
			cm.node("at", scalar(ch.At.String()))
			if ch.Factor != 0 {
				cm.num("factor", ch.Factor)
			} else {
				cm.node("rate", scalar(formatNum(ch.Rate)))
			}
			cm.dur("ramp", ch.Ramp)
			cm.dur("for", ch.For)
			s.Content = append(s.Content, cm.n)
		}
		m.node("schedule", s)
	}
	m.integer("users", int64(c.Users))
	m.node("think", distNode(c.Think, true))
	m.node("cost", distNode(c.Cost, false))
	m.node("actual", distNode(c.Actual, false))
	m.dur("timeout", c.Timeout)
	m.dur("attempt_timeout", c.AttemptTimeout)
	m.node("retry", retryNode(&c.Retry))
	m.num("protected", c.Protected)
	m.integer("queue", int64(c.Queue))
	m.dur("max_wait", c.MaxWait)
	m.boolean("lifo", c.LIFO)
	if l := c.RateLimit; l != nil {
		lm := newMap(true)
		lm.num("rps", l.RPS)
		lm.integer("burst", int64(l.Burst))
		lm.boolean("shared", l.Shared)
		m.node("rate_limit", lm.n)
	}
	if k := c.Keys; k != nil {
		km := newMap(true)
		km.integer("count", int64(k.Count))
		km.num("zipf", k.Zipf)
		km.str("source", k.Source)
		if su := k.Surge; su != nil {
			sm := ynode{spanNode(su.span())}
			sm.num("factor", su.Factor)
			km.node("surge", sm.n)
		}
		m.node("keys", km.n)
	}
	if k := c.KeyConcurrency; k != nil {
		km := newMap(true)
		km.integer("limit", int64(k.Limit))
		km.boolean("shared", k.Shared)
		m.node("key_concurrency", km.n)
	}
	return m.n
}

// spanNode writes a span as {at: ..., for: ...}.
func spanNode(t Span) *yaml.Node {
	m := newMap(true)
	m.node("at", scalar(t.At.String()))
	m.node("for", scalar(t.For.String()))
	return m.n
}

// retryNode returns nil for the zero Retry.
func retryNode(r *Retry) *yaml.Node {
	if r.MaxAttempts == 0 && r.Backoff == 0 && r.MaxBackoff == 0 && !r.HonorNoRetry && !r.HonorRetryAfter && r.Budget == nil && r.Throttle == nil {
		return nil
	}
	m := newMap(false)
	m.integer("max_attempts", int64(r.MaxAttempts))
	m.dur("backoff", r.Backoff)
	m.dur("max_backoff", r.MaxBackoff)
	m.boolean("honor_no_retry", r.HonorNoRetry)
	m.boolean("honor_retry_after", r.HonorRetryAfter)
	if b := r.Budget; b != nil {
		bm := newMap(true)
		bm.num("ratio", b.Ratio)
		bm.num("min_per_second", b.MinPerSecond)
		bm.dur("ttl", b.TTL)
		m.node("budget", bm.n)
	}
	if t := r.Throttle; t != nil {
		tm := newMap(true)
		tm.num("k", t.K)
		tm.dur("window", t.Window)
		m.node("throttle", tm.n)
	}
	return m.n
}

// serviceNode returns nil for the zero Service.
func serviceNode(s *Service) *yaml.Node {
	m := newMap(false)
	m.integer("replicas", int64(s.Replicas))
	if s.Balancer != RoundRobin {
		m.node("balancer", scalar(s.Balancer.String()))
	}
	m.integer("max_cost", s.MaxCost)
	m.integer("static_limit", int64(s.StaticLimit))
	m.boolean("strict", s.Strict)
	m.integer("max_queue", int64(s.MaxQueue))
	m.dur("demand_hold", s.DemandHold)
	m.dur("timeout", s.Timeout)
	m.node("retry", retryNode(&s.Retry))
	m.boolean("no_deadline_propagation", s.NoDeadlinePropagation)
	m.boolean("cancel_at_deadline", s.CancelAtDeadline)
	m.num("deadline_margin", s.DeadlineMargin)
	if len(s.StoreOutages) > 0 {
		os := &yaml.Node{Kind: yaml.SequenceNode}
		for _, o := range s.StoreOutages {
			os.Content = append(os.Content, spanNode(o))
		}
		m.node("store_outages", os)
	}
	if st := s.Store; st != nil {
		sm := newMap(false)
		sm.node("latency", distNode(st.Latency, true))
		sm.dur("timeout", st.Timeout)
		sm.integer("breaker_failures", int64(st.BreakerFailures))
		sm.dur("breaker_open", st.BreakerOpen)
		sm.dur("lease_ttl", st.LeaseTTL)
		sm.boolean("restarts", st.Restarts)
		m.node("store", sm.n) // an empty mapping still says "model the store"
	}
	if len(m.n.Content) == 0 {
		return nil
	}
	return m.n
}

func upstreamNode(u *Upstream) *yaml.Node {
	m := newMap(false)
	m.integer("capacity", int64(u.Capacity))
	if u.Discipline != FIFO {
		m.node("discipline", scalar(u.Discipline.String()))
	}
	m.integer("max_in_flight", int64(u.MaxInFlight))
	m.node("service_time", distNode(u.ServiceTime, true))
	m.num("degradation", u.Degradation)
	m.num("max_degradation", u.MaxDegradation)
	m.num("cost_scaling", u.CostScaling)
	m.num("cost_ref", u.CostRef)
	m.boolean("shared", u.Shared)
	m.boolean("abandon", u.Abandon)
	if len(u.Events) > 0 {
		evs := &yaml.Node{Kind: yaml.SequenceNode}
		for _, e := range u.Events {
			em := newMap(true)
			em.node("at", scalar(e.At.String()))
			em.node("for", scalar(e.For.String()))
			em.num("slowdown", e.Slowdown)
			em.num("errors", e.Errors)
			em.num("capacity", e.Capacity)
			em.integer("replicas", int64(e.Replicas))
			evs.Content = append(evs.Content, em.n)
		}
		m.node("events", evs)
	}
	return m.n
}

// distNode writes a distribution: a constant as a plain value, any other
// as a mapping; nil for the zero Dist.
func distNode(d Dist, isTime bool) *yaml.Node {
	if d.IsZero() {
		return nil
	}
	v := func(f float64) *yaml.Node {
		if isTime {
			return scalar(durNum(f))
		}
		return scalar(formatNum(f))
	}
	if d.Kind == Constant && d.ClampMin == 0 && d.ClampMax == 0 {
		return v(d.Value)
	}
	m := newMap(true)
	m.node("dist", scalar(d.Kind.String()))
	p := func(name string, f float64) { m.node(name, scalar(formatNum(f))) }
	switch d.Kind {
	case Constant:
		m.node("value", v(d.Value))
	case Exponential:
		m.node("mean", v(d.Mean))
	case LogNormal:
		m.node("median", v(d.Median))
		p("sigma", d.Sigma)
	case Uniform:
		m.node("min", v(d.Min))
		m.node("max", v(d.Max))
	case Pareto:
		m.node("median", v(d.Median))
		p("alpha", d.Alpha)
	case Bimodal:
		m.node("median", v(d.Median))
		p("sigma", d.Sigma)
		p("ratio", d.Ratio)
		p("share", d.Share)
	}
	if d.ClampMin != 0 {
		m.node("clamp_min", v(d.ClampMin))
	}
	if d.ClampMax != 0 {
		m.node("clamp_max", v(d.ClampMax))
	}
	return m.n
}

package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Grid is a parameter grid for a sweep: every combination of one value
// per dimension is a configuration.
type Grid []Dim

// Dim is one dimension of a Grid: a policy parameter and its values.
type Dim struct {
	Key    string
	Values []string
}

// ParseGrid parses dimensions separated by spaces or ';', each
// key=v1,v2,...: "tolerance=1.2,1.5,2 smoothing=0.2,0.5".
func ParseGrid(s string) (Grid, error) {
	var g Grid
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ';' || r == '\t' || r == '\n' }) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("sweep: %q is not key=value (values separated by commas)", f)
		}
		if slices.ContainsFunc(g, func(d Dim) bool { return d.Key == k }) {
			return nil, fmt.Errorf("sweep: parameter %q given twice", k)
		}
		vals := strings.Split(v, ",")
		for _, x := range vals {
			if x == "" {
				return nil, fmt.Errorf("sweep: empty value in %q", f)
			}
		}
		g = append(g, Dim{Key: k, Values: vals})
	}
	if len(g) == 0 {
		return nil, fmt.Errorf("sweep: empty grid")
	}
	return g, nil
}

// Size returns the number of configurations.
func (g Grid) Size() int {
	n := 1
	for _, d := range g {
		n *= len(d.Values)
	}
	return n
}

// Expand returns the policy specs of every configuration for each base
// policy (a spec without parameters of the grid's keys), in grid order
// (the last dimension varies fastest). Each spec is validated.
func (g Grid) Expand(bases []string) ([]Policy, error) {
	var out []Policy
	for _, base := range bases {
		name, params, _ := strings.Cut(base, ":")
		for i := range g.Size() {
			var kv []string
			if params != "" {
				kv = append(kv, params)
			}
			rest := i
			idx := make([]int, len(g))
			for d := len(g) - 1; d >= 0; d-- {
				idx[d] = rest % len(g[d].Values)
				rest /= len(g[d].Values)
			}
			for d, dim := range g {
				kv = append(kv, dim.Key+"="+dim.Values[idx[d]])
			}
			p, err := ParsePolicy(name + ":" + strings.Join(kv, ","))
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// Objective ranks configurations: maximize (or minimize) a summary
// metric, subject to constraints that must hold in every scenario.
type Objective struct {
	Metric      string
	Maximize    bool
	Constraints []Constraint
}

// Constraint bounds a summary metric: Metric <= Value (or >=).
type Constraint struct {
	Metric  string
	AtLeast bool // >= instead of <=
	Value   float64
}

func (c Constraint) String() string {
	op := "<="
	if c.AtLeast {
		op = ">="
	}
	return c.Metric + op + strconv.FormatFloat(c.Value, 'g', -1, 64)
}

// holds reports whether the constraint holds for v.
func (c Constraint) holds(v float64) bool {
	if math.IsNaN(v) {
		return false
	}
	if c.AtLeast {
		return v >= c.Value
	}
	return v <= c.Value
}

// DefaultObjective() maximizes goodput (against the ideal).
func DefaultObjective() Objective { return Objective{Metric: "goodput", Maximize: true} }

// ParseObjective parses "max:METRIC" or "min:METRIC" followed by
// comma-separated constraints METRIC<=VALUE or METRIC>=VALUE, where a
// value is a number or a duration (in seconds for latency metrics):
// "max:goodput,trigger_p99<=1.5s,recovery<=5s". A bare METRIC means max.
func ParseObjective(s string) (Objective, error) {
	parts := strings.Split(strings.TrimSpace(s), ",")
	var o Objective
	head := strings.TrimSpace(parts[0])
	switch {
	case strings.HasPrefix(head, "max:"):
		o.Metric, o.Maximize = head[4:], true
	case strings.HasPrefix(head, "min:"):
		o.Metric = head[4:]
	default:
		o.Metric, o.Maximize = head, true
	}
	var s0 Summary
	if _, ok := s0.Metric(o.Metric); !ok && !strings.HasPrefix(o.Metric, "class.") {
		return o, fmt.Errorf("objective: unknown metric %q (known: %s)", o.Metric, metricHelp)
	}
	for _, c := range parts[1:] {
		c = strings.TrimSpace(c)
		op := "<="
		i := strings.Index(c, op)
		if i < 0 {
			op = ">="
			i = strings.Index(c, op)
		}
		if i <= 0 {
			return o, fmt.Errorf("objective: constraint %q is not METRIC<=VALUE or METRIC>=VALUE", c)
		}
		m, v := strings.TrimSpace(c[:i]), strings.TrimSpace(c[i+2:])
		if _, ok := s0.Metric(m); !ok && !strings.HasPrefix(m, "class.") {
			return o, fmt.Errorf("objective: unknown metric %q in %q", m, c)
		}
		var val float64
		if d, err := time.ParseDuration(v); err == nil && strings.ContainsAny(v, "smhµu") {
			val = d.Seconds()
		} else if f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64); err == nil && !math.IsNaN(f) {
			val = f
			if strings.HasSuffix(v, "%") {
				val /= 100
			}
		} else {
			return o, fmt.Errorf("objective: %q in %q is not a number or a duration", v, c)
		}
		o.Constraints = append(o.Constraints, Constraint{Metric: m, AtLeast: op == ">=", Value: val})
	}
	return o, nil
}

func (o Objective) String() string {
	dir := "min:"
	if o.Maximize {
		dir = "max:"
	}
	s := dir + o.Metric
	for _, c := range o.Constraints {
		s += "," + c.String()
	}
	return s
}

// Ranked is one configuration's standing in a sweep.
type Ranked struct {
	Policy string
	// Score is the objective's metric averaged over the scenarios.
	Score float64
	// Feasible reports whether every constraint held in every scenario;
	// Violations says which did not.
	Feasible   bool
	Violations []string
	// Values holds the objective metric per scenario, in input order.
	Values []float64
}

// Rank ranks configurations from their results: byPolicy[i] holds the
// results of configuration i, one per scenario. Feasible configurations
// come first, then the best score; ties keep the input order. Scores of
// NaN rank last.
func Rank(byPolicy [][]*Result, o Objective) []Ranked {
	out := make([]Ranked, 0, len(byPolicy))
	for _, rs := range byPolicy {
		if len(rs) == 0 {
			continue
		}
		rk := Ranked{Policy: rs[0].Policy, Feasible: true}
		sum, n := 0.0, 0
		for _, r := range rs {
			v, _ := r.Summary.Metric(o.Metric)
			rk.Values = append(rk.Values, v)
			// A metric a scenario does not define (trigger_goodput of a
			// scenario without a trigger) is NaN: leave it out of the mean
			// rather than spoil the score of every configuration.
			if !math.IsNaN(v) {
				sum += v
				n++
			}
			for _, c := range o.Constraints {
				x, ok := r.Summary.Metric(c.Metric)
				if !ok || !c.holds(x) {
					rk.Feasible = false
					rk.Violations = append(rk.Violations, fmt.Sprintf("%s: %s = %.4g", r.Scenario.Name, c, x))
				}
			}
		}
		rk.Score = math.NaN()
		if n > 0 {
			rk.Score = sum / float64(n)
		}
		out = append(out, rk)
	}
	slices.SortStableFunc(out, func(a, b Ranked) int {
		if a.Feasible != b.Feasible {
			if a.Feasible {
				return -1
			}
			return 1
		}
		an, bn := math.IsNaN(a.Score), math.IsNaN(b.Score)
		if an || bn {
			if an && bn {
				return 0
			}
			if an {
				return 1
			}
			return -1
		}
		if o.Maximize {
			return cmp.Compare(b.Score, a.Score)
		}
		return cmp.Compare(a.Score, b.Score)
	})
	return out
}

package failsafesim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/sim"
)

// PolicyName is the name under which Register makes the policy known to
// sim.ParsePolicy and shedsim.
const PolicyName = "failsafe-adaptive"

var policyParams = []string{"min", "max", "initial", "max_factor", "window", "window_max", "min_samples", "quantile", "baseline", "correlation", "drops"}

// Register registers the "failsafe-adaptive" policy with package sim.
// Calling it again is harmless.
func Register() {
	sim.RegisterPolicy(PolicyName,
		"failsafe-go v0.9.8 adaptivelimiter, default tuning, in virtual time (clock injected by reflection: see bench/failsafesim); initial=N (default 20), min=N (1), max=N (200, or initial or min if higher), drops=record|drop",
		policyParams, NewPolicy)
}

// NewPolicy builds the policy from shedsim parameters (see Register).
func NewPolicy(params map[string]string) (sim.Policy, error) {
	var c Config
	var err error
	setErr := func(k string, e error) {
		if err == nil {
			err = fmt.Errorf("policy %s: parameter %s: %v", PolicyName, k, e)
		}
	}
	uintParam := func(k string, dst *uint) {
		if v, ok := params[k]; ok {
			n, e := strconv.ParseUint(v, 10, 32)
			if e != nil || n == 0 {
				setErr(k, fmt.Errorf("%q is not a positive integer", v))
			}
			*dst = uint(n)
		}
	}
	floatParam := func(k string, dst *float64) {
		if v, ok := params[k]; ok {
			f, e := strconv.ParseFloat(v, 64)
			if e != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				setErr(k, fmt.Errorf("%q is not a finite number", v))
			}
			*dst = f
		}
	}
	durParam := func(k string, dst *time.Duration) {
		if v, ok := params[k]; ok {
			d, e := time.ParseDuration(v)
			if e != nil || d <= 0 {
				setErr(k, fmt.Errorf("%q is not a positive duration (e.g. 500ms)", v))
			}
			*dst = d
		}
	}
	for k := range params {
		if !slices.Contains(policyParams, k) {
			setErr(k, fmt.Errorf("unknown (known: %s)", strings.Join(policyParams, ", ")))
		}
	}
	uintParam("min", &c.MinLimit)
	uintParam("max", &c.MaxLimit)
	uintParam("initial", &c.InitialLimit)
	floatParam("max_factor", &c.MaxLimitFactor)
	durParam("window", &c.WindowMin)
	durParam("window_max", &c.WindowMax)
	uintParam("min_samples", &c.WindowMinSamples)
	floatParam("quantile", &c.Quantile)
	uintParam("baseline", &c.BaselineAge)
	uintParam("correlation", &c.CorrelationWindow)
	switch params["drops"] {
	case "", "record":
	case "drop":
		c.Drops = DropsDrop
	default:
		setErr("drops", fmt.Errorf("%q is not record or drop", params["drops"]))
	}
	if err != nil {
		return nil, err
	}
	if _, err := New(c); err != nil {
		return nil, paramError(err)
	}
	return sim.PolicyFunc(sim.CanonicalPolicyName(PolicyName, params), func(env sim.PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
		src, err := New(c)
		if err != nil {
			return nil, nil, err
		}
		cfg := env.Config
		cfg.Source = src
		cfg.Observer = src.Observer(cfg.Observer)
		l, err := shed.New(cfg)
		return l, src, err
	}), nil
}

// configParams maps the Config fields named by New's errors to the
// parameters that set them.
var configParams = []struct{ field, param string }{
	{"MinLimit", "min"}, {"MaxLimit", "max"}, {"InitialLimit", "initial"},
	{"MaxLimitFactor", "max_factor"}, {"WindowMin", "window"}, {"WindowMax", "window_max"},
	{"Quantile", "quantile"},
}

// paramError names the parameter behind a configuration error (which
// names the Config field), so that the message says what to change in the
// spec.
func paramError(err error) error {
	for _, f := range configParams {
		// Matched with its separators: MaxLimit is a prefix of MaxLimitFactor.
		if strings.Contains(err.Error(), ": "+f.field+": ") {
			return fmt.Errorf("policy %s: parameter %s: %w", PolicyName, f.param, err)
		}
	}
	return fmt.Errorf("policy %s: %w", PolicyName, err)
}

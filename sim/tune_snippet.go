package sim

import (
	"fmt"
	"go/format"
	"strconv"
	"strings"
	"time"

	"github.com/shedkit/shedkit/record"
)

// tuneFields maps the parameters [TuneSpace] sweeps to the fields of the
// limit's configuration in package limits, per policy.
var tuneFields = map[string]map[string]string{
	"shedkit-gradient": {"tolerance": "Tolerance", "backoff": "Backoff"},
	"shedkit-aimd":     {"tolerance": "LatencyTolerance", "backoff": "Backoff"},
}

// GoSnippet returns Go source that builds the candidate's admission
// control for the service of sc: an import block and a function
// newAdmission returning the shed.Limiter (with its limit from package
// limits and the scenario's classes and service settings) and, when the
// candidate sets one, the retrybudget.Budget to share between the
// service's outgoing calls (retrybudget.TransportConfig.Budget). When a
// class has a rate limit, a function newHTTPOptions also returns the
// middleware's shedhttp.Options with the limiter and the rate limits
// (RateLimits), and KeyHeader when the scenario's keys came from a
// trusted request header (Keys.Source, as shedsim fit carries it from a
// recording). When a class has a key concurrency, a function
// newTenantConcurrency returns the shedredis.ConcurrencyMiddleware that
// caps each tenant's requests in flight (see keyConcurrencySource).
// Pasted after a package clause it compiles; a test builds it. An error
// says that the policy is not one Tune sweeps.
func (c *TuneCandidate) GoSnippet(sc *Scenario) (string, error) {
	limit, err := limitSource(c.Policy)
	if err != nil {
		return "", err
	}
	var body strings.Builder
	usesTime := false
	fmt.Fprintf(&body, "\tlimit, err := %s\n\tif err != nil {\n\t\treturn nil, nil, err\n\t}\n", limit)
	body.WriteString("\tlimiter, err := shed.New(shed.Config{\n\t\tSource: limit,\n\t\tClasses: []shed.ClassConfig{\n")
	for i, k := range c.Classes {
		fmt.Fprintf(&body, "\t\t\t{Name: %q", sc.Classes[i].Name)
		if k.Protected > 0 {
			fmt.Fprintf(&body, ", Protected: %g", k.Protected)
		}
		if k.Queue > 0 {
			fmt.Fprintf(&body, ", QueueDepth: %d, MaxWait: %s", k.Queue, goDuration(k.MaxWait))
			usesTime = true
		}
		if sc.Classes[i].LIFO {
			body.WriteString(", LIFO: true")
		}
		body.WriteString("},\n")
	}
	body.WriteString("\t\t},\n")
	usesTime = serviceFields(&body, &sc.Service) || usesTime
	body.WriteString("\t})\n\tif err != nil {\n\t\treturn nil, nil, err\n\t}\n")
	budget := "nil"
	if b := c.Budget; b != nil {
		fmt.Fprintf(&body, "\tbudget, err := retrybudget.NewBudget(retrybudget.BudgetConfig{RetryRatio: %g, MinRetriesPerSecond: %g})\n\tif err != nil {\n\t\treturn nil, nil, err\n\t}\n", b.Ratio, b.MinPerSecond)
		budget = "budget"
	}
	fmt.Fprintf(&body, "\treturn limiter, %s, nil\n}\n", budget)
	rates := c.rateLimitsSource(sc)
	body.WriteString(rates)
	conc := c.keyConcurrencySource(sc)
	body.WriteString(conc)

	var out strings.Builder
	out.WriteString("import (\n")
	if conc != "" {
		out.WriteString("\t\"net/http\"\n")
	}
	if usesTime {
		out.WriteString("\t\"time\"\n")
	}
	out.WriteString("\n")
	if conc != "" {
		out.WriteString("\t\"github.com/redis/go-redis/v9\"\n")
	}
	out.WriteString("\t\"github.com/shedkit/shedkit/limits\"\n")
	if rates != "" {
		out.WriteString("\t\"github.com/shedkit/shedkit/middleware/shedhttp\"\n")
	}
	if conc != "" {
		out.WriteString("\t\"github.com/shedkit/shedkit/middleware/shedredis\"\n")
	}
	out.WriteString("\t\"github.com/shedkit/shedkit/retrybudget\"\n\t\"github.com/shedkit/shedkit/shed\"\n)\n\n")
	out.WriteString("// newAdmission builds the service's admission control as shedsim tune\n// recommends it. Share the budget (nil: keep your own) between the\n// service's outgoing calls: retrybudget.TransportConfig{Budget: budget}.\n")
	out.WriteString("func newAdmission() (*shed.Limiter, *retrybudget.Budget, error) {\n")
	out.WriteString(body.String())
	src, err := format.Source([]byte(out.String()))
	if err != nil {
		return "", fmt.Errorf("sim: tune: snippet: %w", err)
	}
	return string(src), nil
}

// rateLimitsSource returns the function newHTTPOptions, which sets the
// candidate's rate limits in the middleware's options (and the key
// header the recorded keys came from, see keyHeader), or "" when no
// class has one. shedhttp.Options.RateLimits is what nethttp.Config and
// echo.Config embed; its default MemoryStore keeps a bucket per replica,
// as the simulator does without Shared.
func (c *TuneCandidate) rateLimitsSource(sc *Scenario) string {
	var m strings.Builder
	oneKey, shared := false, false
	var tenants []string
	for i, k := range c.Classes {
		if l := k.RateLimit; l != nil {
			burst := l.Burst
			if burst == 0 {
				burst = DefaultBurst(l.RPS)
			}
			fmt.Fprintf(&m, "\t\t\t%q: {Rate: %s, Burst: %d},\n", sc.Classes[i].Name, strconv.FormatFloat(l.RPS, 'g', -1, 64), burst)
			oneKey = oneKey || sc.Classes[i].Keys == nil || sc.Classes[i].Keys.Count <= 1
			if k := sc.Classes[i].Keys; k != nil && k.Count > 1 {
				tenants = append(tenants, strconv.Quote(sc.Classes[i].Name))
			}
			shared = shared || l.Shared
		}
	}
	if m.Len() == 0 {
		return ""
	}
	caveat := ""
	if oneKey {
		caveat = "// The simulator saw a class without keys as one key: a class spread over\n" +
			"// many keys (clients, tenants) needs each key's share of its rate.\n"
	}
	header := keyHeader(sc)
	caveat += keyCaveat(tenants, header)
	if shared {
		caveat += "// The rates are for the whole fleet: set nethttp.Config.KeyStore to a\n" +
			"// shedredis.Store, or each replica lets a key through at the full rate.\n"
	}
	return "\n// newHTTPOptions returns the middleware's options with the rate limits\n" +
		"// shedsim tune recommends, per key and class: use it as\n" +
		"// nethttp.Config{Options: newHTTPOptions(limiter)} (or echo.Config).\n" +
		caveat +
		"func newHTTPOptions(limiter *shed.Limiter) shedhttp.Options {\n" +
		"\treturn shedhttp.Options{\n\t\tLimiter: limiter,\n" + keyHeaderField(header) +
		"\t\tRateLimits: map[string]shedhttp.RateLimit{\n" +
		m.String() + "\t\t},\n\t}\n}\n"
}

// keyConcurrencySource returns the function newTenantConcurrency, which
// builds a shedredis.ConcurrencyMiddleware per class with a key
// concurrency (each class counts its own leases, under a Config.Prefix
// of its own, as the simulator counts them), or "" when no class has
// one. shedredis keeps the leases in Redis for the fleet; the scenario's
// replica count is its Config.Replicas, the share each replica enforces
// alone while Redis cannot be used. A cap the simulator kept per replica
// (one replica, or not Shared) is said to be one in the comment.
func (c *TuneCandidate) keyConcurrencySource(sc *Scenario) string {
	var caps strings.Builder
	perReplica := false
	for i, k := range c.Classes {
		if l := k.KeyConcurrency; l != nil {
			fmt.Fprintf(&caps, "\t\t{%q, %d},\n", sc.Classes[i].Name, l.Limit)
			perReplica = perReplica || (!l.Shared && sc.Service.Replicas > 1)
		}
	}
	if caps.Len() == 0 {
		return ""
	}
	n := max(sc.Service.Replicas, 1) // unset (a fitted scenario): one, as the simulator ran it
	comment := fmt.Sprintf("// Replicas (%d) is the fleet the caps were tried on: the leases are kept in\n"+
		"// Redis for all of it, and while Redis cannot be used each replica enforces\n"+
		"// Limit/Replicas (rounded up) alone. Set it to the replicas you run.\n", n)
	if perReplica {
		comment += "// The simulator kept these caps per replica: in Redis they hold for the\n" +
			"// fleet, so multiply a limit by the replicas to keep what was tried.\n"
	}
	if h := keyHeader(sc); h != "" {
		comment += "// The recording took the tenant from the header " + strconv.Quote(h) + ": return\n" +
			"// r.Header.Get(" + strconv.Quote(h) + ") for the class's requests, kept trusted.\n"
	}
	return "\n// newTenantConcurrency returns the caps on each tenant's requests in flight\n" +
		"// shedsim tune recommends, per class, as middleware to put outside the\n" +
		"// shedkit middleware: handler := perTenant(admission(app)), so that a tenant\n" +
		"// at its cap takes no place in the admission queue. tenant returns the\n" +
		"// tenant of a request of the class named, \"\" for a request of another class\n" +
		"// (not capped). client must have ContextTimeoutEnabled (see\n" +
		"// shedredis.Config.Client). Close the Concurrency values when the service\n" +
		"// stops.\n" +
		comment +
		"func newTenantConcurrency(client redis.UniversalClient, tenant func(r *http.Request, class string) string) (func(http.Handler) http.Handler, []*shedredis.Concurrency, error) {\n" +
		"\twrap := func(h http.Handler) http.Handler { return h }\n" +
		"\tvar concs []*shedredis.Concurrency\n" +
		"\tfail := func(err error) (func(http.Handler) http.Handler, []*shedredis.Concurrency, error) {\n" +
		"\t\tfor _, c := range concs {\n\t\t\t_ = c.Close()\n\t\t}\n\t\treturn nil, nil, err\n\t}\n" +
		"\tfor _, c := range []struct {\n\t\tclass string\n\t\tlimit int\n\t}{\n" + caps.String() + "\t} {\n" +
		fmt.Sprintf("\t\tconc, err := shedredis.NewConcurrency(shedredis.Config{Client: client, Replicas: %d, Prefix: shedredis.DefaultPrefix + c.class + \":\"})\n", n) +
		"\t\tif err != nil {\n\t\t\treturn fail(err)\n\t\t}\n" +
		"\t\tconcs = append(concs, conc)\n" +
		"\t\tmw, err := shedredis.ConcurrencyMiddleware(shedredis.MiddlewareConfig{\n" +
		"\t\t\tConcurrency: conc,\n" +
		"\t\t\tKey:         func(r *http.Request) string { return tenant(r, c.class) },\n" +
		"\t\t\tLimit:       c.limit,\n\t\t})\n" +
		"\t\tif err != nil {\n\t\t\treturn fail(err)\n\t\t}\n" +
		"\t\tinner := wrap\n" +
		"\t\twrap = func(h http.Handler) http.Handler { return inner(mw(h)) }\n" +
		"\t}\n\treturn wrap, concs, nil\n}\n"
}

// keyHeader returns the trusted request header the scenario's keys came
// from (Keys.Source), when every class that says where its keys came
// from names that one header; "" otherwise. The middleware takes every
// class's key from one place, so classes that disagree set none.
func keyHeader(sc *Scenario) string {
	name := ""
	for _, c := range sc.Classes {
		if c.Keys == nil || c.Keys.Source == "" {
			continue
		}
		h, ok := record.KeySourceHeader(c.Keys.Source)
		if !ok || (name != "" && h != name) {
			return ""
		}
		name = h
	}
	return name
}

// keyCaveat says how the rate-limit key must be taken for the quotas of
// the classes tenants to hold as they were tried: from header when the
// recording says so, else as the service took it when recorded.
func keyCaveat(tenants []string, header string) string {
	switch {
	case len(tenants) > 0 && header != "":
		return "// The limits of " + strings.Join(tenants, ", ") + " are quotas per tenant, tried on the scenario's keys:\n" +
			"// the rate-limit key is the tenant, from the header the recording took it\n" +
			"// from (KeyHeader). Keep that header trusted: set by your proxy, never by\n" +
			"// a client.\n"
	case len(tenants) > 0:
		return "// The limits of " + strings.Join(tenants, ", ") + " are quotas per tenant, tried on the scenario's keys:\n" +
			"// the rate-limit key must be the tenant (Options.KeyHeader naming a\n" +
			"// trusted tenant header, or Classify's Key), as it was when recorded.\n"
	case header != "":
		return "// KeyHeader is the header the recording took the rate-limit keys from.\n" +
			"// Keep it trusted: set by your proxy, never by a client.\n"
	}
	return ""
}

// keyHeaderField is the KeyHeader line of the options, "" for none. A
// header name is a token (record.KeySourceHeader checks it); quoted, it
// is a Go string whatever it holds.
func keyHeaderField(header string) string {
	if header == "" {
		return ""
	}
	return "\t\tKeyHeader: " + strconv.Quote(header) + ",\n"
}

// limitSource returns the Go expression that builds the policy's limit.
func limitSource(spec string) (string, error) {
	name, rest, _ := strings.Cut(spec, ":")
	fields, ok := tuneFields[name]
	if !ok {
		return "", fmt.Errorf("sim: tune: no Go snippet for policy %s", name)
	}
	var kv []string
	if rest != "" {
		for _, p := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(p, "=")
			f, ok := fields[k]
			if !ok {
				return "", fmt.Errorf("sim: tune: no Go field for parameter %s of %s", k, name)
			}
			kv = append(kv, f+": "+v)
		}
	}
	ctor := map[string]string{"shedkit-gradient": "limits.NewGradient(limits.GradientConfig{", "shedkit-aimd": "limits.NewAIMD(limits.AIMDConfig{"}[name]
	return ctor + strings.Join(kv, ", ") + "})", nil
}

// serviceFields writes the shed.Config fields the scenario's service sets
// and reports whether one is a duration.
func serviceFields(b *strings.Builder, s *Service) bool {
	if s.MaxCost > 0 {
		fmt.Fprintf(b, "\t\tMaxCost: %d,\n", s.MaxCost)
	}
	if s.Strict {
		b.WriteString("\t\tStrict: true,\n")
	}
	if s.MaxQueue > 0 {
		fmt.Fprintf(b, "\t\tMaxQueue: %d,\n", s.MaxQueue)
	}
	if s.DeadlineMargin > 0 {
		fmt.Fprintf(b, "\t\tDeadlineMargin: %g,\n", s.DeadlineMargin)
	}
	if s.DemandHold > 0 {
		fmt.Fprintf(b, "\t\tDemandHold: %s,\n", goDuration(s.DemandHold))
		return true
	}
	return false
}

// goDuration writes d as a Go expression: 250 * time.Millisecond.
func goDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "Hour"}, {time.Minute, "Minute"}, {time.Second, "Second"}, {time.Millisecond, "Millisecond"}, {time.Microsecond, "Microsecond"}} {
		if d%u.d == 0 {
			return fmt.Sprintf("%d * time.%s", d/u.d, u.name)
		}
	}
	return fmt.Sprintf("%d * time.Nanosecond", d)
}

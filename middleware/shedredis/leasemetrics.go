package shedredis

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/shedkit/shedkit/middleware/shedhttp"
)

// MetricLeaseDecisions counts the decisions of Concurrency.Acquire, by
// shedkit.decision (admitted, rejected at the key's limit, cancelled: the
// caller's context ended first) and AttrFallback (taken on this
// replica's share because Redis could not be used). It is how a
// dashboard sees tenants capped by their fleet limit: the rejections are
// ConcurrencyMiddleware's 429s, the cancellations its 503s but those
// after Close. The key is never an attribute: tenants are unbounded.
const MetricLeaseDecisions = "shedkit.store.lease.decisions"

// AttrDecision is the attribute of MetricLeaseDecisions that holds the
// decision, the key of shedkit.admission.decisions' decision.
const AttrDecision = attribute.Key(shedhttp.AttrDecision)

// leaseDecision indexes the decisions MetricLeaseDecisions counts.
type leaseDecision int

const (
	leaseAdmitted leaseDecision = iota
	leaseRejected
	leaseCancelled
	leaseDecisions // how many
)

// The values of AttrDecision, the words of shedkit.admission.decisions.
var leaseDecisionNames = [leaseDecisions]string{
	leaseAdmitted:  shedhttp.DecisionAdmitted,
	leaseRejected:  shedhttp.DecisionRejected,
	leaseCancelled: "cancelled",
}

// leaseMetrics records MetricLeaseDecisions. Its options are built once,
// and passed as a slice, so that recording a decision allocates nothing.
type leaseMetrics struct {
	decisions metric.Int64Counter
	opts      [leaseDecisions][2][]metric.AddOption // by decision, then fell back
}

func newLeaseMetrics(cfg *Config) (*leaseMetrics, error) {
	m := &leaseMetrics{}
	var err error
	if m.decisions, err = cfg.MeterProvider.Meter(scopeName).Int64Counter(MetricLeaseDecisions,
		metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions of a shedkit store on concurrency leases: admitted, rejected at the key's fleet limit, or cancelled.")); err != nil {
		return nil, err
	}
	store := AttrStore.String(cfg.Name)
	for d, name := range leaseDecisionNames {
		for fb := range 2 {
			set := attribute.NewSet(store, AttrDecision.String(name), attribute.Bool(AttrFallback, fb == 1))
			m.opts[d][fb] = []metric.AddOption{metric.WithAttributeSet(set)}
		}
	}
	return m, nil
}

// record counts the outcome of an Acquire, told by what it returned. An
// Acquire that ends in ErrClosed (the service is shutting down) or in an
// invalid limit (a caller's bug) decided nothing about the key's limit,
// and is not counted.
func (m *leaseMetrics) record(ctx context.Context, l *Lease, err error) {
	var d leaseDecision
	fellBack := false
	switch e := err.(type) {
	case nil:
		d, fellBack = leaseAdmitted, l.local
	case *LimitError:
		d, fellBack = leaseRejected, e.FellBack
	default:
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return
		}
		d = leaseCancelled
	}
	fb := 0
	if fellBack {
		fb = 1
	}
	m.decisions.Add(ctx, 1, m.opts[d][fb]...)
}

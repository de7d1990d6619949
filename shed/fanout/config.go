package fanout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// Config configures one fan-out. Zero fields take the documented defaults;
// Run rejects invalid values with an error that names the field and wraps
// ErrInvalidConfig. In is the input type: per-item admission requests are
// computed from the input.
type Config[In any] struct {
	// Bound is the most tasks of this fan-out that exist at once (created
	// and not yet finished). The next input is pulled only when one of
	// them finishes. Required, in [1, MaxBound]: Run's buffers hold Bound
	// results (fewer with MaxItems), so a bound taken from a request
	// must not size them.
	Bound int

	// Limiter, when set, is a service-wide bound shared by many fan-outs:
	// each task holds one of its permits while the task function runs. A
	// task waiting for its permit already holds its per-request slot.
	//
	// When the context given to Run carries a permit of this same limiter
	// (shed.PermitFromContext: the request's own, which shedkit's
	// middleware puts there), that permit is the request's capacity and
	// its tasks use it: one task at a time runs on it without asking the
	// limiter; the others take a free permit of the limiter if there is
	// one (TryAcquire: they never wait in its queue), else (refused for
	// capacity, for the tenant's share, or because the limiter drains)
	// wait for the request's own, within PermitWait. A task on the
	// request's own permit counts at its class and cost, not the item's.
	// A request that filled the limiter thus runs its items one at a time
	// instead of failing them; without that, its tasks would wait for
	// more permits from the pool that the requests themselves hold.
	Limiter *shed.Limiter
	// Request returns the admission request (class, cost, deadline) for an
	// input. Nil means shed.Request{}: class 0, cost 1. When the request
	// has no Deadline, the parent context's deadline is used. A task
	// corrects an estimated Cost with Reconcile once it knows the actual
	// one. Only with Limiter.
	Request func(in In) shed.Request
	// PermitWait bounds how long a task waits for its permit. When it
	// expires the item fails with a *shed.Rejection (ReasonQueueTimeout,
	// errors.Is shed.ErrRejected). It bounds the wait, not the work: it is
	// never passed to the limiter as the item's deadline (with
	// shed.Config.DeadlineMargin that would refuse work whose service time
	// exceeds PermitWait). Zero means no bound of its own: the
	// limiter's queue (ClassConfig.MaxWait) and the context bound the
	// wait. Only with Limiter.
	PermitWait time.Duration
	// Outcome maps a task's error to the outcome its permit is released
	// with. Nil means DefaultOutcome. Only with Limiter. It should not
	// panic; if it does, the panic is recovered and the permit is released
	// as shed.Ignored, and the item's result is unchanged. If it calls
	// runtime.Goexit, the permit is released as shed.Ignored and the item
	// is reported with ErrGoexit, as for a task.
	Outcome func(err error) shed.Outcome

	// Ordered delivers results in input order. Results that complete ahead
	// of the oldest unfinished item wait in a reorder buffer.
	Ordered bool
	// ReorderBuffer bounds that buffer (Ordered only): item i is started
	// only when i - head <= ReorderBuffer, where head is the oldest item
	// not yet delivered. An early slow item therefore throttles the
	// fan-out: at most ReorderBuffer items past it are started until it
	// finishes. Zero means Bound.
	ReorderBuffer int

	// FailFast stops the fan-out at the first task error: running tasks
	// are cancelled and awaited, no more input is pulled, and Run returns
	// an *ItemError. Without it every item's error is delivered in its
	// Result and Run continues.
	FailFast bool

	// MaxItems, when > 0, is the most inputs accepted. Pulling input
	// MaxItems+1 stops the fan-out with a *TooManyItemsError before that
	// item's task is created. Zero means no maximum.
	MaxItems int
	// Len, when > 0, is the number of inputs if known in advance (a
	// slice: see RunSlice; a count the request announced). When it
	// exceeds MaxItems, Run returns a *TooManyItemsError at once, before
	// any input is pulled or any task started. Zero means unknown.
	Len int
}

// ErrInvalidConfig is wrapped by every configuration or argument error
// from Run.
var ErrInvalidConfig = errors.New("fanout: invalid config")

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// MaxBound is the largest Bound and ReorderBuffer: far beyond any useful
// concurrency, and small enough that the buffers they size stay small.
const MaxBound = 1 << 16

// validate checks c and returns a copy with defaults filled in.
func (c Config[In]) validate() (Config[In], error) {
	if c.Bound <= 0 || c.Bound > MaxBound {
		return c, configError("Bound", "must be in [1, %d], got %d", MaxBound, c.Bound)
	}
	if c.Limiter == nil {
		switch {
		case c.Request != nil:
			return c, configError("Request", "needs a Limiter")
		case c.PermitWait != 0:
			return c, configError("PermitWait", "needs a Limiter")
		case c.Outcome != nil:
			return c, configError("Outcome", "needs a Limiter")
		}
	}
	if c.PermitWait < 0 {
		return c, configError("PermitWait", "must be >= 0, got %v", c.PermitWait)
	}
	if c.Outcome == nil {
		c.Outcome = DefaultOutcome
	}
	if c.ReorderBuffer < 0 || c.ReorderBuffer > MaxBound {
		return c, configError("ReorderBuffer", "must be in [0, %d], got %d", MaxBound, c.ReorderBuffer)
	}
	if c.ReorderBuffer > 0 && !c.Ordered {
		return c, configError("ReorderBuffer", "set without Ordered")
	}
	if c.Ordered && c.ReorderBuffer == 0 {
		c.ReorderBuffer = c.Bound
	}
	if c.MaxItems < 0 {
		return c, configError("MaxItems", "must be >= 0, got %d", c.MaxItems)
	}
	if c.Len < 0 {
		return c, configError("Len", "must be >= 0, got %d", c.Len)
	}
	return c, nil
}

// DefaultOutcome is the permit outcome used when Config.Outcome is nil:
//
//   - nil: shed.Success (the latency is a sample for an adaptive limit);
//   - an error matching context.DeadlineExceeded: shed.Dropped, the work
//     ran out of time, which is the overload signal adaptive limits need;
//   - any other error, a panic or a cancellation: shed.Ignored. An
//     arbitrary error (a 404, a validation failure, a sibling's fail-fast
//     cancellation) says nothing about capacity, and counting it as a drop
//     would shrink the limit for clients that send bad items.
//
// Supply Config.Outcome to report, say, an upstream 503 as shed.Dropped.
func DefaultOutcome(err error) shed.Outcome {
	switch {
	case err == nil:
		return shed.Success
	case isPanic(err):
		return shed.Ignored
	case errors.Is(err, context.DeadlineExceeded):
		return shed.Dropped
	}
	return shed.Ignored
}

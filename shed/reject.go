package shed

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Reason says why work was not admitted.
type Reason uint8

const (
	// ReasonNone is the zero Reason: the work was admitted.
	ReasonNone Reason = iota
	// ReasonLimit: the concurrency limit (or cost budget) is reached and
	// the class does not queue.
	ReasonLimit
	// ReasonQueueFull: the class's queue, or the total queue, is full.
	ReasonQueueFull
	// ReasonQueueTimeout: the request waited its maximum time, or until
	// its deadline, without being admitted.
	ReasonQueueTimeout
	// ReasonDeadline: the request's deadline has passed, or its remaining
	// time is shorter than its expected queue wait plus its expected
	// service time (times Config.DeadlineMargin), so it was rejected at
	// once instead of admitted or queued.
	ReasonDeadline
	// ReasonCostTooLarge: the request's cost exceeds the whole cost budget
	// and could never be admitted.
	ReasonCostTooLarge
	// ReasonDraining: the limiter is draining and admits nothing.
	ReasonDraining
	// ReasonRateLimited is not produced by a Limiter: middleware that rate
	// limits before admission uses it, so that all rejections share one
	// vocabulary in metrics and traces.
	ReasonRateLimited
	// ReasonTenantShare: the request's class is contended and its tenant
	// (Request.Tenant) already holds its share of the class, so admitting
	// it would take capacity from the class's other tenants. Queued
	// requests whose tenant is over its share when their turn comes are
	// rejected likewise.
	ReasonTenantShare
	// ReasonKeyConcurrency is not produced by a Limiter either: a tenant
	// (key) already had its cap of requests in flight, and middleware in
	// front of the limiter refused the request (a recorded 429 of
	// shedredis.ConcurrencyMiddleware), so that a recording, and the fit
	// of it, can tell it from a rate limit's 429.
	ReasonKeyConcurrency

	numReasons = iota
)

var reasonNames = [numReasons]string{"none", "limit_exceeded", "queue_full", "queue_timeout", "deadline_too_short", "cost_too_large", "draining", "rate_limited", "tenant_share", "key_concurrency"}

// String returns the reason's stable, low-cardinality name, for example
// "queue_full". It is safe to use as a metric attribute.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// ErrRejected matches every *Rejection with errors.Is.
var ErrRejected = errors.New("shed: rejected")

// Rejection is the error returned when work is not admitted. Rejections
// are shared and immutable: do not modify one obtained through errors.As.
type Rejection struct {
	// Reason says why the work was rejected.
	Reason Reason
	// Class is the class of the rejected request.
	Class Class
	// ClassName is the name of that class.
	ClassName string
	// RetryAfter hints when capacity is likely to be available again. The
	// limiter's estimate is raised to Config.RetryAfterMin, rounded up to
	// a step of 100 ms below 1 s, 1 s up to 1 min, 10 s up to 10 min and
	// 1 min above, then capped at Config.RetryAfterMax: it always lies in
	// [RetryAfterMin, RetryAfterMax]. With RetryAfterMin of at least a
	// second (the default), it is therefore a whole number of seconds
	// unless it equals a RetryAfterMax that is not.
	RetryAfter time.Duration
}

// Error describes the rejection for logs. It names no internal state
// beyond the reason and class; what a remote client sees is the job of the
// middleware.
func (r *Rejection) Error() string {
	return "shed: rejected: " + r.Reason.String() + " (class " + r.ClassName + ", retry after " + r.RetryAfter.String() + ")"
}

// Is reports whether target is ErrRejected.
func (r *Rejection) Is(target error) bool { return target == ErrRejected }

// ReasonOf returns the Reason of a *Rejection in err's chain, or ReasonNone.
func ReasonOf(err error) Reason {
	var r *Rejection
	if errors.As(err, &r) {
		return r.Reason
	}
	return ReasonNone
}

// rejections hands out immutable *Rejection values without allocating on
// the rejection path, which is the hot path under overload. Values are
// created on first use for each (reason, class, rounded Retry-After); the
// rounding steps keep a row of the table under 175 entries whatever the
// configured bounds.
type rejections struct {
	min     time.Duration
	max     time.Duration
	buckets int
	names   []string
	mu      sync.Mutex
	rows    [numReasons][MaxClasses]atomic.Pointer[[]atomic.Pointer[Rejection]]
}

// retrySteps is the rounding policy documented on Rejection.RetryAfter:
// hints up to upTo are rounded up to a multiple of step. The relative
// rounding error stays under 17% above 1 s (HTTP carries whole seconds
// anyway), and the steps end at MaxRetryAfter.
var retrySteps = [...]struct{ upTo, step time.Duration }{
	{time.Second, 100 * time.Millisecond},
	{time.Minute, time.Second},
	{10 * time.Minute, 10 * time.Second},
	{MaxRetryAfter, time.Minute},
}

// retryBucket rounds d (0 <= d <= MaxRetryAfter) up to its step and returns
// the rounded value and its index in a row: indexes grow with the value,
// without gaps, from 0 for 0.
func retryBucket(d time.Duration) (int, time.Duration) {
	base, lo := 0, time.Duration(0)
	for _, s := range retrySteps {
		if d <= s.upTo {
			n := (d - lo + s.step - 1) / s.step
			return base + int(n), lo + n*s.step
		}
		base += int((s.upTo - lo) / s.step)
		lo = s.upTo
	}
	return base, lo // d > MaxRetryAfter: New rejects such bounds
}

func (t *rejections) init(min, max time.Duration, names []string) {
	t.min, t.max, t.names = min, max, names
	b, _ := retryBucket(max)
	t.buckets = b + 1
}

// get returns the shared rejection for reason and class with a Retry-After
// hint close to hint (raised to the minimum, rounded up to its step,
// capped at the maximum).
func (t *rejections) get(reason Reason, class Class, hint time.Duration) *Rejection {
	// Every hint at or below max lands in a bucket at or below max's, so
	// the index stays in the row; the value of max's bucket is max itself.
	b, v := retryBucket(min(max(hint, t.min), t.max))
	row := t.rows[reason][class].Load()
	if row == nil {
		t.mu.Lock()
		if row = t.rows[reason][class].Load(); row == nil {
			r := make([]atomic.Pointer[Rejection], t.buckets)
			row = &r
			t.rows[reason][class].Store(row)
		}
		t.mu.Unlock()
	}
	slot := &(*row)[b]
	if r := slot.Load(); r != nil {
		return r
	}
	r := &Rejection{Reason: reason, Class: class, ClassName: t.names[class], RetryAfter: min(v, t.max)}
	if slot.CompareAndSwap(nil, r) {
		return r
	}
	return slot.Load()
}

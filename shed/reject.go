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
	// ReasonDeadline: the request's remaining deadline is shorter than the
	// expected wait, so it was rejected at once instead of queued.
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

	numReasons = iota
)

var reasonNames = [numReasons]string{"none", "limit_exceeded", "queue_full", "queue_timeout", "deadline_too_short", "cost_too_large", "draining", "rate_limited"}

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
	// RetryAfter hints when capacity is likely to be available again. It is
	// bounded by Config.RetryAfterMin and RetryAfterMax and rounded up to
	// 100 ms (whole seconds when RetryAfterMin is at least a second).
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
// created on first use for each (reason, class, quantized Retry-After).
type rejections struct {
	quantum time.Duration
	min     time.Duration
	max     time.Duration
	buckets int
	names   []string
	mu      sync.Mutex
	rows    [numReasons][MaxClasses]atomic.Pointer[[]atomic.Pointer[Rejection]]
}

// maxRejectionBuckets bounds the memory of one (reason, class) row.
const maxRejectionBuckets = 600

func (t *rejections) init(min, max time.Duration, names []string) {
	t.min, t.max, t.names = min, max, names
	t.quantum = 100 * time.Millisecond
	if min >= time.Second {
		t.quantum = time.Second
	}
	for int(max/t.quantum) >= maxRejectionBuckets {
		t.quantum *= 2
	}
	t.buckets = int(max/t.quantum) + 2
}

// get returns the shared rejection for reason and class with a Retry-After
// hint close to hint (clamped, rounded up to the quantum).
func (t *rejections) get(reason Reason, class Class, hint time.Duration) *Rejection {
	hint = min(max(hint, t.min), t.max)
	b := int((hint + t.quantum - 1) / t.quantum)
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
	r := &Rejection{Reason: reason, Class: class, ClassName: t.names[class], RetryAfter: time.Duration(b) * t.quantum}
	if slot.CompareAndSwap(nil, r) {
		return r
	}
	return slot.Load()
}

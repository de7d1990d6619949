package limits

import (
	"sync/atomic"

	"github.com/shedkit/shedkit/shed"
)

// Fixed is a constant limit that an operator may change at run time. It
// ignores samples.
type Fixed struct {
	n atomic.Int64
}

// NewFixed returns a Fixed limit of n, which must be >= 1.
func NewFixed(n int) (*Fixed, error) {
	f := new(Fixed)
	if err := f.Set(n); err != nil {
		return nil, err
	}
	return f, nil
}

// Set changes the limit to n, which must be >= 1. Work already admitted is
// not revoked when the limit shrinks.
func (f *Fixed) Set(n int) error {
	if n < 1 {
		return configError("Fixed limit", "must be >= 1, got %d", n)
	}
	f.n.Store(int64(n))
	return nil
}

// Limit returns the limit.
func (f *Fixed) Limit() int { return int(f.n.Load()) }

// Observe does nothing: a fixed limit learns nothing.
func (f *Fixed) Observe(shed.Sample) {}

var (
	_ shed.LimitSource = (*Fixed)(nil)
	_ shed.LimitSource = (*Gradient)(nil)
	_ shed.LimitSource = (*AIMD)(nil)
)

package fanout_test

import (
	"iter"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"
)

// item is an input that the tests watch with a weak pointer, to see
// whether the fan-out still holds it. The padding keeps it out of the
// tiny allocator, whose blocks are freed together.
type item struct {
	id int
	_  [48]byte
}

// source is a lazy input of n items created on demand. It counts pulls and
// keeps only weak pointers, so an item is reachable only through the
// fan-out (or a task) that holds it.
type source struct {
	n      int
	pulled atomic.Int64
	// onPull, when set, runs before each item is yielded.
	onPull func(index int)

	mu   sync.Mutex
	weak []weak.Pointer[item]
}

func newSource(n int) *source { return &source{n: n} }

func (s *source) seq() iter.Seq[*item] {
	return func(yield func(*item) bool) {
		for i := range s.n {
			it := &item{id: i}
			s.mu.Lock()
			s.weak = append(s.weak, weak.Make(it))
			s.mu.Unlock()
			s.pulled.Add(1)
			if s.onPull != nil {
				s.onPull(i)
			}
			if !yield(it) {
				return
			}
		}
	}
}

// live collects garbage and returns how many pulled items are still
// reachable.
func (s *source) live() int {
	runtime.GC()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.weak {
		if w.Value() != nil {
			n++
		}
	}
	return n
}

// maxInt64 raises m to v if v is larger.
func maxInt64(m *atomic.Int64, v int64) {
	for {
		old := m.Load()
		if v <= old || m.CompareAndSwap(old, v) {
			return
		}
	}
}

package fanout

import (
	"context"
	"sync"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// Reconcile replaces the cost that the item of the task running with ctx
// reserved (Config.Request's Cost) with actual, its actual cost once known:
// the tokens an LLM call really used, say. The limiter's in-flight cost
// moves by the difference at once, while the task goes on; a smaller cost
// may admit waiting work. It may be called several times, the last call
// wins, and from any goroutine the task hands its context to. ctx is the
// task's context or one derived from it.
//
// The permit stays the fan-out's: it is released once, by Run, when the
// task ends, with the cost last reconciled. Reconcile reports whether the
// item's cost is now actual; it reports false and changes nothing when
// the item has ended (a goroutine that outlived its task: its context
// never reaches another item's permit), when the task holds no permit of
// its own (no Config.Limiter, no Config.Request to set a cost, or the task runs on the request's own
// permit, which is the request's to reconcile), when ctx is not a task's,
// and when shed.Permit.Reconcile refuses actual (negative, or taking the
// limiter's in-flight cost out of range).
func Reconcile(ctx context.Context, actual int64) bool {
	if ctx == nil {
		return false
	}
	c, _ := ctx.Value(itemKey{}).(*itemContext)
	if c == nil {
		return false
	}
	return c.slot.reconcile(c.index, actual)
}

// itemKey is the context key under which a task's context answers with
// its *itemContext.
type itemKey struct{}

// itemSlot is a worker's state for the item it runs: the item's index and
// permit, which Reconcile may correct while the task runs. Allocated once
// per worker of a Run with a Limiter.
type itemSlot struct {
	ctx    context.Context // the tasks' context
	mu     sync.Mutex
	index  int         // the item the worker runs or ran last
	permit shed.Permit // zero once that item has ended, or if it has none
}

// begin starts item index on the slot, with its permit p.
func (s *itemSlot) begin(index int, p shed.Permit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index, s.permit = index, p
}

// take ends the item: it returns its permit for the fan-out to release,
// and leaves nothing for Reconcile.
func (s *itemSlot) take() shed.Permit {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.permit
	s.permit = shed.Permit{}
	return p
}

func (s *itemSlot) reconcile(index int, actual int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock() // deferred: the limiter's Observer may panic
	return s.index == index && s.permit.Valid() && s.permit.Reconcile(actual) == nil
}

// itemContext is the context of one task of a Run with a Limiter: the
// tasks' context, which also leads Reconcile to the task's item. Each is
// used for one item only: a goroutine that outlives its task may keep the
// context, and must find its item ended, not the one its worker runs now.
type itemContext struct {
	slot  *itemSlot
	index int
}

func (c *itemContext) Deadline() (time.Time, bool) { return c.slot.ctx.Deadline() }
func (c *itemContext) Done() <-chan struct{}       { return c.slot.ctx.Done() }
func (c *itemContext) Err() error                  { return c.slot.ctx.Err() }

func (c *itemContext) Value(key any) any {
	if key == (itemKey{}) {
		return c
	}
	return c.slot.ctx.Value(key)
}

// itemless is the tasks' context of a Run nested in a task: it hides the
// outer task's item, so that a nested task without a permit of its own
// cannot reconcile the outer one's.
type itemless struct{ context.Context }

func (c itemless) Value(key any) any {
	if key == (itemKey{}) {
		return nil
	}
	return c.Context.Value(key)
}

// maxItemBatch is the most item contexts allocated at once: one
// allocation serves up to that many items, and a goroutine that outlives
// its task keeps at most that many (2 KB) reachable.
const maxItemBatch = 128

// nextItem returns a fresh item context for the input about to start; its
// worker fills it in. They are allocated in batches and never reused: the
// first batch holds Bound (at most maxItemBatch), each next one twice the
// last, up to maxItemBatch, and none more than the items MaxItems leaves.
func (r *runner[In, Out]) nextItem() *itemContext {
	if len(r.items) == 0 {
		r.batch = min(max(r.cfg.Bound, 2*r.batch), maxItemBatch)
		if r.cfg.MaxItems > 0 {
			r.batch = min(r.batch, r.cfg.MaxItems-r.pulled)
		}
		r.items = make([]itemContext, r.batch)
	}
	c := &r.items[0]
	r.items = r.items[1:]
	return c
}

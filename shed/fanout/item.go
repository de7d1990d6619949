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
// moves by the difference at once, while the task goes on: a smaller cost
// may admit waiting work; a larger one is taken even beyond the limiter's
// MaxCost, since admitted work is never refused. It may be called several
// times, the last call wins, and from any goroutine the task hands its
// context to. ctx is the task's context or one derived from it, with or
// without its cancellation (context.WithoutCancel).
//
// The permit stays the fan-out's: it is released once, by Run, when the
// task returns, panics or calls runtime.Goexit, with the cost last
// reconciled. Until then Reconcile works, also once the fan-out stopped
// and cancelled the task's context. It reports whether the item's cost is
// now actual; it reports false and changes nothing:
//   - once the task has ended: a goroutine that outlived its task, during
//     or after Run, never reaches another item's permit;
//   - without Config.Limiter or without Config.Request (every item costs
//     1): Run then makes no item contexts;
//   - when the task runs on the request's own permit (see
//     Config.Limiter), which is the request's to reconcile;
//   - in a task of a Run nested in a task, unless that Run has a Limiter
//     and a Request of its own: it never reaches the outer item;
//   - when ctx is nil or not a task's;
//   - when shed.Permit.Reconcile refuses actual: negative, above
//     shed.MaxTotalCost, or raising the limiter's in-flight cost above it.
//
// Lowering the cost hands the budget freed to waiting work, which runs
// the limiter's user code (Observer, LimitSource, Clock). If that panics,
// the panic goes on to the caller of Reconcile with the cost already
// reconciled, as shed.Permit.Reconcile's does: the item may be reconciled
// again and its permit is released as usual. In the task the panic
// becomes the item's *PanicError; another goroutine must recover it.
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
// allocation serves up to that many items. A goroutine that outlives its
// task keeps its batch reachable (2 KB at most) and, through it, the
// itemSlot of each worker that ran one of them (64 bytes, up to 128):
// about 10 KB, none of it the runner's, the inputs' or a permit.
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

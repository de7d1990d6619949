package fanout

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// Result is the outcome of one item.
type Result[Out any] struct {
	// Index is the item's position in the input, from 0.
	Index int
	// Value is what the task returned; the zero value when it panicked or
	// could not get a permit.
	Value Out
	// Err is the task's error, a *PanicError, or the error of the
	// limiter's Acquire (a *shed.Rejection, or the context's error). When
	// releasing the item's permit panicked (a limiter Observer), it is
	// the *PanicError joined with the task's error (errors.As finds it).
	Err error
}

// Run calls task for every input of items, with at most cfg.Bound tasks in
// existence at once, and passes each Result to each, on the caller's
// goroutine, one at a time.
//
// Inputs are pulled lazily: the next one only when a task has finished
// and, in ordered mode, the reorder buffer has room. So at most cfg.Bound
// inputs are held by the fan-out at any time, however long the input is.
//
// Results arrive in completion order, or in input order with
// cfg.Ordered. A non-nil error from each stops the fan-out and is
// returned. A nil each discards the results (tasks with side effects).
//
// Run stops early when ctx ends (it returns ctx.Err()), when each returns
// an error, at the first task error with cfg.FailFast (*ItemError), and
// when the input exceeds cfg.MaxItems (*TooManyItemsError). Stopping pulls
// no more input, cancels the context of the running tasks, discards their
// results and waits for them: Run returns only after every task it started
// has ended, also when each or the iterator panics.
//
// Invalid arguments (cfg.Bound <= 0, a nil task or items, other invalid
// fields) return an error wrapping ErrInvalidConfig before anything runs.
func Run[In, Out any](ctx context.Context, items iter.Seq[In], task func(ctx context.Context, in In) (Out, error), cfg Config[In], each func(Result[Out]) error) error {
	cfg, err := cfg.validate()
	if err != nil {
		return err
	}
	if items == nil {
		return configError("items", "must not be nil")
	}
	if task == nil {
		return configError("task", "must not be nil")
	}
	if cfg.MaxItems > 0 && cfg.Len > cfg.MaxItems {
		return &TooManyItemsError{Max: cfg.MaxItems, Len: cfg.Len}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &runner[In, Out]{
		cfg:    cfg,
		task:   task,
		each:   each,
		parent: ctx,
		// Every task sends exactly one result and at most Bound tasks
		// exist (at most MaxItems ever), so a worker never blocks on its
		// send: it drops its input as soon as its task is done.
		results: make(chan envelope[Out], capped(cfg.Bound, cfg.MaxItems)),
		jobs:    make(chan job[In]),
	}
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.done = r.ctx.Done()
	if ctx.Value(itemKey{}) != nil {
		// A Run nested in a task: its tasks reconcile their own items,
		// never the outer task's.
		r.ctx = itemless{r.ctx}
	}
	if own := shed.PermitFromContext(ctx); cfg.Limiter != nil && cfg.Limiter.Holds(own) {
		// The request's own capacity, as a token that one task holds at
		// a time.
		r.own = make(chan struct{}, 1)
		r.own <- struct{}{}
	}
	if cfg.Ordered {
		r.ring = make([]slot[Out], capped(cfg.ReorderBuffer, cfg.MaxItems)+1)
	}
	return r.run(items)
}

// capped returns n, or maxItems when that is set and smaller: a fan-out
// of at most maxItems items never holds more results than that.
func capped(n, maxItems int) int {
	if maxItems > 0 {
		return min(n, maxItems)
	}
	return n
}

type job[In any] struct {
	index int
	in    In
	item  *itemContext // the task's context, with a Limiter
}

// envelope is a result as sent by a worker; exited says the worker ended
// (its task called runtime.Goexit).
type envelope[Out any] struct {
	res    Result[Out]
	exited bool
}

type slot[Out any] struct {
	res Result[Out]
	ok  bool
}

// runner is the state of one Run. Everything but cfg, task, ctx and
// results is owned by the caller's goroutine.
type runner[In, Out any] struct {
	cfg     Config[In]
	task    func(context.Context, In) (Out, error)
	each    func(Result[Out]) error
	parent  context.Context
	ctx     context.Context // the tasks' context, cancelled on stop
	cancel  context.CancelFunc
	done    <-chan struct{}
	results chan envelope[Out]
	jobs    chan job[In] // unbuffered: a job is handed to an idle worker
	// own holds a token while the permit of the request the fan-out runs
	// for (see Config.Limiter) is free for a task; nil when there is none.
	own chan struct{}
	// items is the rest of the current batch of item contexts, of size
	// batch (see nextItem).
	items []itemContext
	batch int

	workers int            // worker goroutines alive
	exited  sync.WaitGroup // Run waits for its workers to exit
	running int            // tasks started and not yet received
	pulled  int            // inputs pulled, which is the next input's index
	err     error          // why the fan-out stopped; nil while it runs

	// Ordered mode: ring holds results by index modulo len(ring); head is
	// the oldest index not yet delivered. Indexes in flight lie in
	// [head, head+ReorderBuffer], so slots never collide.
	ring []slot[Out]
	head int
}

func (r *runner[In, Out]) run(items iter.Seq[In]) error {
	// Deferred so that a panic in each or in the iterator still cancels
	// and awaits every task.
	defer r.finish()
	for in := range items {
		if !r.start(in) {
			break
		}
	}
	for r.running > 0 && r.err == nil {
		r.receive()
	}
	return r.err
}

// start creates the task for the input just pulled, then waits until the
// next input may be pulled. It reports whether to go on.
func (r *runner[In, Out]) start(in In) bool {
	if r.err != nil {
		return false
	}
	if r.cancelled() {
		return false
	}
	if r.cfg.MaxItems > 0 && r.pulled == r.cfg.MaxItems {
		r.stop(&TooManyItemsError{Max: r.cfg.MaxItems})
		return false
	}
	j := job[In]{index: r.pulled, in: in}
	if r.cfg.Limiter != nil && r.cfg.Request != nil {
		// Only a Request sets a cost a task may reconcile: without one,
		// no item context is made (they cost an allocation per batch).
		j.item = r.nextItem()
	}
	r.pulled++
	r.running++
	if r.running > r.workers {
		r.workers++
		r.exited.Add(1)
		go r.worker(j)
	} else {
		r.jobs <- j
	}
	for r.err == nil && (r.running >= r.cfg.Bound || (r.ring != nil && r.pulled-r.head > r.cfg.ReorderBuffer)) {
		r.receive()
	}
	return r.err == nil
}

// receive waits for one task to end and handles its result. It needs no
// select on ctx: when ctx ends the tasks' context ends too, and Run has to
// wait for them anyway.
func (r *runner[In, Out]) receive() {
	e := <-r.results
	r.running--
	if e.exited {
		r.workers--
	}
	res := e.res
	if r.err != nil || r.cancelled() {
		return
	}
	if res.Err != nil && r.cfg.FailFast {
		r.stop(&ItemError{Index: res.Index, Err: res.Err})
		return
	}
	if r.ring == nil {
		r.deliver(res)
		return
	}
	r.ring[res.Index%len(r.ring)] = slot[Out]{res: res, ok: true}
	for r.err == nil {
		s := &r.ring[r.head%len(r.ring)]
		if !s.ok {
			break
		}
		res := s.res
		*s = slot[Out]{} // drop the reference to the value
		r.head++
		r.deliver(res)
	}
}

func (r *runner[In, Out]) deliver(res Result[Out]) {
	if r.each == nil {
		return
	}
	if err := r.each(res); err != nil {
		r.stop(err)
	}
}

// cancelled reports whether the parent context has ended, and stops the
// fan-out with its error if so.
func (r *runner[In, Out]) cancelled() bool {
	select {
	case <-r.done:
	default:
		return false
	}
	err := r.parent.Err()
	if err == nil { // cancelled by stop, which already set r.err
		err = r.ctx.Err()
	}
	r.stop(err)
	return true
}

func (r *runner[In, Out]) stop(err error) {
	if r.err == nil {
		r.err = err
	}
	r.cancel()
}

// finish cancels the tasks still running and waits for them, discarding
// their results, then ends the workers and waits for them too: no
// goroutine of the fan-out outlives Run.
func (r *runner[In, Out]) finish() {
	r.cancel()
	for r.running > 0 {
		if e := <-r.results; e.exited {
			r.workers--
		}
		r.running--
	}
	close(r.jobs)
	r.exited.Wait()
}

// worker runs j, then the jobs handed to it, until the fan-out finishes.
// Workers are started on demand, at most Bound of them, and live until Run
// returns: reusing them saves a goroutine start and an allocation per item.
// An idle worker holds no input.
func (r *runner[In, Out]) worker(j job[In]) {
	defer r.exited.Done()
	var slot *itemSlot
	if r.cfg.Limiter != nil {
		slot = &itemSlot{ctx: r.ctx, index: -1}
	}
	for {
		if !r.work(j, slot) {
			return
		}
		var ok bool
		if j, ok = <-r.jobs; !ok {
			return
		}
	}
}

// work runs one task and sends its result. It reports whether the worker
// may go on: false after runtime.Goexit, which ends the goroutine anyway.
// The deferred function reports a panic (or Goexit) as the item's error,
// and settle releases the permit (or hands the request's own back) on
// every path and always sends, so the scheduler never waits for a result
// that will not come.
func (r *runner[In, Out]) work(j job[In], slot *itemSlot) (alive bool) {
	res := Result[Out]{Index: j.index}
	onOwn := false
	defer func() {
		goexit := false
		if !alive {
			var zero Out
			res.Value = zero
			v := recover()
			if v == nil {
				v, goexit = ErrGoexit, true
			}
			res.Err = &PanicError{Value: v, Stack: debug.Stack()}
			alive = !goexit
		}
		r.settle(res, slot, onOwn, goexit)
	}()
	ctx := r.ctx
	if slot != nil {
		var p shed.Permit
		p, onOwn, res.Err = r.acquire(j.in)
		if res.Err != nil {
			return true
		}
		slot.begin(j.index, p)
		if j.item != nil {
			*j.item = itemContext{slot: slot, index: j.index}
			ctx = j.item
		}
	}
	res.Value, res.Err = r.task(ctx, j.in)
	return true
}

// settle gives back what the task held and sends its result. Releasing
// runs user code: shed lets a panicking Observer (or LimitSource) unwind
// through Release, and Outcome may call runtime.Goexit (t.FailNow). So
// the send is deferred: the scheduler gets exactly one result per task
// whatever happens, a panic is recovered here, where nobody else could,
// and becomes the item's error (joined with the task's own), and a Goexit
// ends the worker as a task's does.
//
// A Goexit is told apart from a panic by where execution goes on, not by
// recover: a panic raised during a Goexit (an Observer panicking on the
// fallback release after Outcome called Goexit) is recovered all the
// same, but the runtime then resumes the Goexit instead of returning, so
// the code after the release below is never reached.
func (r *runner[In, Out]) settle(res Result[Out], slot *itemSlot, onOwn, goexit bool) {
	returned := false
	defer func() {
		if !returned && !goexit { // a task's Goexit was reported already
			goexit = true
			var zero Out
			res.Value = zero
			res.Err = errors.Join(res.Err, &PanicError{Value: ErrGoexit, Stack: debug.Stack()})
		}
		r.results <- envelope[Out]{res: res, exited: goexit}
	}()
	r.giveBack(&res, slot, onOwn)
	returned = true
}

// giveBack releases the task's permit (or hands the request's own back).
// If releasing panics, the panic becomes the item's error, joined with
// the task's own. It does not return if Outcome or the Observer calls
// runtime.Goexit.
func (r *runner[In, Out]) giveBack(res *Result[Out], slot *itemSlot, onOwn bool) {
	defer func() {
		if v := recover(); v != nil {
			var zero Out
			res.Value = zero
			res.Err = errors.Join(res.Err, &PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	if onOwn {
		r.own <- struct{}{}
		return
	}
	if slot == nil {
		return
	}
	// Taken from the item first: from here on, Reconcile reports false.
	if p := slot.take(); p.Valid() {
		// Deferred too, for an Outcome that calls Goexit; after the
		// Release below it does nothing (Release is idempotent).
		defer p.Release(shed.Ignored)
		p.Release(r.outcome(res.Err))
	}
}

// outcome is Config.Outcome of err. It is user code running on a worker,
// after the task's panic was recovered: a panic in it would crash the
// process and keep the permit, so it is recovered too and the permit is
// released as shed.Ignored.
func (r *runner[In, Out]) outcome(err error) (o shed.Outcome) {
	defer func() {
		if recover() != nil {
			o = shed.Ignored
		}
	}()
	return r.cfg.Outcome(err)
}

// acquire waits for a permit of the service-wide limiter while the task
// holds its per-request slot. onOwn reports that the task runs on the
// request's own permit instead (see Config.Limiter).
func (r *runner[In, Out]) acquire(in In) (p shed.Permit, onOwn bool, err error) {
	var req shed.Request
	if r.cfg.Request != nil {
		req = r.cfg.Request(in)
	}
	if req.Deadline.IsZero() {
		// The caller's deadline, not PermitWait's: the limiter uses it to
		// refuse at once work that cannot finish in time.
		req.Deadline, _ = r.ctx.Deadline()
	}
	ctx := r.ctx
	if r.cfg.PermitWait > 0 {
		wait, cancel := context.WithTimeout(r.ctx, r.cfg.PermitWait)
		defer cancel()
		ctx = patience{wait, r.ctx}
	}
	if r.own != nil {
		p, onOwn, err = r.acquireOrOwn(ctx, req)
	} else {
		p, err = r.cfg.Limiter.Acquire(ctx, req)
	}
	if err != nil && r.cfg.PermitWait > 0 && errors.Is(err, context.DeadlineExceeded) && r.ctx.Err() == nil {
		err = &shed.Rejection{Reason: shed.ReasonQueueTimeout, Class: req.Class, ClassName: r.cfg.Limiter.ClassName(req.Class)}
	}
	return p, onOwn, err
}

// patience is the context of a wait bounded by Config.PermitWait: it ends
// when the wait does, but reports the tasks' deadline, not its own.
// Acquire takes its context's deadline as the request's when the request
// has none, and PermitWait bounds the wait, not the work: taken for the
// work's deadline, it would have the limiter (with DeadlineMargin) refuse
// every item whose expected service time exceeds PermitWait, even with
// room to spare.
type patience struct {
	context.Context // the wait: Done, Err, Value
	tasks           context.Context
}

func (c patience) Deadline() (time.Time, bool) { return c.tasks.Deadline() }

// acquireOrOwn gets a task its permit when the request holds one of the
// limiter: the request's own if it is free, else a free one of the
// limiter, else the request's own as soon as it frees (until ctx ends).
// It never waits in the limiter's queue: the request can always go on on
// its own permit, and the queue is for requests that have none.
func (r *runner[In, Out]) acquireOrOwn(ctx context.Context, req shed.Request) (shed.Permit, bool, error) {
	if err := checkRequest(r.cfg.Limiter, req); err != nil {
		return shed.Permit{}, false, err
	}
	select {
	case <-r.own:
		return shed.Permit{}, true, nil
	default:
	}
	p, err := r.cfg.Limiter.TryAcquire(req)
	if err == nil || !shortOfCapacity(err) {
		return p, false, err
	}
	select {
	case <-r.own:
		return shed.Permit{}, true, nil
	case <-ctx.Done():
		return shed.Permit{}, false, ctx.Err()
	}
}

// checkRequest refuses a malformed request (an unknown class, a negative
// cost) as the limiter would, before a task runs on the request's own
// permit without asking the limiter: else Config.Request's bug would show
// only for the items that found that permit busy.
func checkRequest(l *shed.Limiter, req shed.Request) error {
	switch {
	case l.ClassName(req.Class) == "": // every class of a limiter has a name
		return fmt.Errorf("%w: unknown class %d", shed.ErrInvalidRequest, req.Class)
	case req.Cost < 0:
		return fmt.Errorf("%w: negative cost %d", shed.ErrInvalidRequest, req.Cost)
	}
	return nil
}

// shortOfCapacity reports whether err refuses new capacity, which the
// request's own permit may make up for; a deadline that is too short or a
// cost that is too large it does not. A drain refuses new work but lets
// work in flight, such as this request, finish; a tenant over its share
// may still use what it holds, such as this request's permit.
func shortOfCapacity(err error) bool {
	switch shed.ReasonOf(err) {
	case shed.ReasonLimit, shed.ReasonQueueFull, shed.ReasonQueueTimeout,
		shed.ReasonDraining, shed.ReasonTenantShare:
		return true
	}
	return false
}

// RunSlice is Run over the elements of items. Its length is known, so an
// input longer than cfg.MaxItems is refused with a *TooManyItemsError
// before any task starts (Config.Len), and Run's buffers hold at most
// len(items) results, whatever cfg.Bound.
func RunSlice[In, Out any](ctx context.Context, items []In, task func(ctx context.Context, in In) (Out, error), cfg Config[In], each func(Result[Out]) error) error {
	cfg.Len = len(items)
	if n := len(items); n > 0 && (cfg.MaxItems == 0 || cfg.MaxItems > n) {
		// A slice cannot grow: a maximum of its length refuses nothing,
		// and it sizes Run's buffers (see capped) for the slice, not for
		// Bound.
		cfg.MaxItems = n
	}
	return Run(ctx, slices.Values(items), task, cfg, each)
}

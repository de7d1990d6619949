// Package fanout runs one task per item of a request's list with a bound
// on the tasks that exist at once, not only on the calls they make.
//
// An aggregation endpoint that starts a goroutine per item and bounds the
// upstream calls with a semaphore inside each task still creates one
// goroutine per item, each holding its input while it waits: 10,000 items
// are 10,000 goroutines. [Run] instead pulls the next input from a lazy
// [iter.Seq] only when a task has finished, so a fan-out never holds more
// than Config.Bound inputs, whatever the length of the list.
//
// # Two bounds
//
// Config.Bound is per request: at most Bound tasks of one Run exist
// (created and not yet finished). Config.Limiter, a [shed.Limiter] shared
// by the service, is the bound on the upstream: each task holds one of its
// permits while the task function runs. The permit is acquired inside the
// task, so a task waiting for the global permit already holds its
// per-request slot: with 100 concurrent requests of Bound 8 over a limiter
// of 50, at most 800 tasks exist (up to 750 of them waiting, each holding
// one input) and at most 50 upstream calls run. A request can therefore
// never take more than Bound of the global permits, and its waiting tasks
// are bounded by Bound too. The wait is bounded by the limiter's queue
// (ClassConfig.MaxWait; without a queue it is rejected at once), by
// Config.PermitWait and by the context; the request's deadline
// (Config.Request's, else the context's) is passed to the limiter so that
// work that cannot finish in time is refused at once instead of queued.
// PermitWait bounds only the wait and is never taken for the work's
// deadline. A rejection or expiry is that item's error (errors.Is
// [shed.ErrRejected]); an expiry of PermitWait is a *shed.Rejection with
// ReasonQueueTimeout and no Retry-After hint.
//
// # Under the request's own limiter
//
// A handler behind shedkit's middleware already holds a permit of the
// middleware's limiter. If Config.Limiter is that same limiter, its tasks
// must not wait for more permits from the pool the requests hold: when
// requests fill the limiter, every task would wait for a permit that only
// the end of those same requests frees, and fail (4 requests of 8 items
// each on a limiter of 4: all 32 items failed with queue_timeout). So when
// the context given to Run carries a permit of Config.Limiter
// ([shed.PermitFromContext]; the middleware puts the request's permit
// there), that permit is the request's share: one task at a time runs on
// it without asking the limiter; the other tasks take a free permit of the
// limiter when there is one (they never queue), else wait for the
// request's own, within PermitWait. A task on the request's own permit
// counts at that permit's class and cost, not at its item's
// (Config.Request's class, cost and deadline only shape the requests made
// of the limiter); a malformed one is still the item's error. An item
// that finds the request's own permit busy and that the limiter refuses
// for capacity, for its tenant's share or because it is draining (the
// request is work in flight, which a drain lets finish) waits for the
// request's own; one refused for its deadline or its cost fails. A
// request that filled the limiter runs its items one at a time; one that
// finds room fans out across it. A separate limiter for the upstream
// calls (sized for the upstream) avoids the question altogether.
//
// A task's context derives from Run's, so it carries the request's
// permit (shed.PermitFromContext), not the task's own, which stays the
// fan-out's: Run releases it exactly once, when the task ends. A Run
// nested in a task over the same limiter therefore runs on the request's
// permit too, beside the outer tasks that use it: the limiter still holds
// a permit per running call only while each outer task does nothing else
// but wait for its nested Run.
//
// Config.Request computes each item's class and cost from its input;
// Config.Outcome decides how its permit is released. [DefaultOutcome]
// reports success as shed.Success, a context.DeadlineExceeded as
// shed.Dropped (the overload signal), and every other error, panic or
// cancellation as shed.Ignored: an arbitrary item error (a 404, a
// malformed item) says nothing about capacity, and counting it as a drop
// would let bad input shrink an adaptive limit. The permit is released
// exactly once on every path: success, error, panic, runtime.Goexit,
// cancellation, and also when Outcome calls runtime.Goexit, when the
// limiter's Observer panics as the permit is released, or both (the
// panic is then the item's error, a *PanicError joined with the task's
// own, and a Goexit adds ErrGoexit). Request and
// Outcome are called on the tasks' goroutines, concurrently: they must be
// safe for concurrent use.
//
// # Reconciling an item's cost
//
// An item whose Config.Request reserves an estimate (an LLM call's prompt
// and maximum answer tokens) corrects it once the actual cost is known:
// [Reconcile](ctx, actual), from the task or from any goroutine it handed
// its context to (or one derived from it, context.WithoutCancel's too).
// The limiter's in-flight cost moves by the difference at once, so budget
// the item no longer needs admits waiting work while the task goes on (a
// larger cost is taken even beyond the limiter's MaxCost), and Run
// releases the permit with the cost last reconciled when the task ends,
// however it ends. Reconcile works until the task ends, also once the
// fan-out stopped and cancelled its context. It reports false and changes
// nothing once the item has ended (a goroutine that outlived its task
// never reaches the permit of another item), without a Config.Request
// (every item then costs 1), and for a task without a permit of its own:
// without a Limiter, or on the request's own permit, which is the
// request's to reconcile; a task of a nested Run never reaches the outer
// item's. It refuses the costs shed refuses: negative, or out of the
// limiter's range. Lowering a cost runs the limiter's Observer,
// LimitSource and Clock for the waiting work it admits: if they panic,
// the panic goes on to the caller of Reconcile (the item's error, in the
// task), with the cost reconciled and the permit still released once.
//
// # Results
//
// Each [Result] carries the item's Index (its position in the input),
// Value and Err. Results are passed to a callback that Run calls on the
// caller's goroutine, one at a time: the consumer needs no locking, and a
// slow consumer slows the fan-out instead of piling results up (no task
// starts while it runs, so at most Bound finished results wait for it). A
// callback rather than a returned iterator keeps Run's
// lifetime explicit: when Run returns, every task has ended.
//
// Results arrive in completion order. Config.Ordered delivers them in input
// order: a result that finishes ahead of the oldest undelivered item waits
// in a reorder buffer of Config.ReorderBuffer results (default Bound). The
// buffer is bounded by not starting item i until i - head <=
// ReorderBuffer, where head is the oldest item not yet delivered. An early
// slow item therefore throttles the fan-out: at most ReorderBuffer items
// past it are started until it finishes. The default, Bound, keeps every
// slot busy while the head is up to one task duration late and holds no
// more results than Bound tasks would; raise it when task durations vary
// widely, at the cost of that many buffered results.
//
// # Errors, cancellation and panics
//
// By default every item's error is delivered in its Result and Run goes on
// (an aggregation usually answers with partial results). With
// Config.FailFast the first task error to complete (not the lowest index)
// stops the fan-out and Run returns an *[ItemError] naming the item.
//
// The fan-out also stops when the parent context ends (Run returns
// ctx.Err()), when the callback returns an error (returned as is), or when
// the input is longer than Config.MaxItems (a *[TooManyItemsError],
// errors.Is [ErrTooManyItems]). When the length is known in advance,
// [RunSlice] or Config.Len, an oversized input is refused before any task
// starts; otherwise it is detected when item MaxItems+1 is pulled, before
// its task is created, so a handler refuses an oversized stream before it
// builds per-item data for the rest. Stopping pulls no more
// input, cancels the context of the running tasks, discards their results
// and waits for them. Results delivered before the stop stay delivered.
// Run returns only after every task has ended, also when the callback or
// the iterator panics (the panic then continues in the caller).
//
// A panic in a task is recovered on the task's goroutine and reported as
// that item's error, a *[PanicError] with the value and the stack; it never
// crashes the caller. A task that calls runtime.Goexit is reported the
// same way, with the value [ErrGoexit].
//
// # Invalid arguments
//
// Bound <= 0, a nil task or a nil iterator, negative fields, a
// ReorderBuffer without Ordered, and limiter fields without a Limiter are
// errors wrapping [ErrInvalidConfig] that name the field. A nil callback
// discards the results (tasks run for their side effects).
//
// # Cost
//
// Tasks run on at most Bound worker goroutines, started on demand and
// reused for the next item: a job is handed to an idle worker over an
// unbuffered channel, so no input waits in a queue. Per item, the
// scheduler does two channel operations and no allocation (about 20
// allocations per Run; PermitWait adds a timer context and its wrapper
// per item). With a Limiter, each worker allocates its item's state once,
// and with a Request too, the tasks' contexts that lead Reconcile to it
// come in batches of
// up to 128: 16 bytes per item and one allocation per 128 items, never
// reused, since a goroutine may keep its task's context (it then keeps
// about 10 KB reachable at most: its batch and the item state of the
// workers that ran it, none of the fan-out's inputs, results or permits);
// errgroup.Group with SetLimit starts a goroutine
// and allocates twice per item. See bench_test.go.
//
// # Input
//
// Run takes an [iter.Seq]. For an [iter.Seq2] or a channel, adapt it with a
// small closure; the fan-out pulls lazily from whatever the iterator
// wraps, so a streamed request body is read only as fast as tasks finish.
//
// The iterator runs on the caller's goroutine, and so does everything Run
// decides: while it blocks for the next input, finished results wait for
// the callback, a FailFast error waits to stop the fan-out, and the end of
// the context is noticed (Run returns) only when it yields or returns;
// the running tasks' context ends at once all the same. An iterator that
// may block (a channel, a slow body) should watch the context Run was
// given. It must not wait for results of the same Run (a queue that the
// callback feeds, as in a crawl): Run takes results only when Bound tasks
// exist, the reorder buffer is full or the input has ended, so such a
// wait deadlocks. It must call yield from the goroutine Run called it on,
// never concurrently, and stop when yield returns false.
package fanout

package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/fanout"
)

// 20 inputs, bound 3, the upstream blocked on a channel: exactly 3 inputs
// are pulled and held, exactly 3 tasks have started. synctest.Wait returns
// once every goroutine is blocked, so a scheduler that pulled ahead or
// started a 4th task would already have done so.
func TestBoundHoldsWhileUpstreamBlocked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newSource(20)
		release := make(chan struct{})
		var started atomic.Int64
		got := make(map[int]int)
		maxLive := 0
		errc := make(chan error, 1)
		go func() {
			errc <- fanout.Run(t.Context(), src.seq(),
				func(ctx context.Context, in *item) (int, error) {
					started.Add(1)
					<-release // the controlled upstream
					return in.id * 10, nil
				},
				fanout.Config[*item]{Bound: 3},
				func(r fanout.Result[int]) error {
					if _, dup := got[r.Index]; dup {
						t.Errorf("index %d delivered twice", r.Index)
					}
					got[r.Index] = r.Value
					// Every finished task has dropped its input: with
					// Run still running, at most Bound are reachable.
					synctest.Wait()
					maxLive = max(maxLive, src.live())
					return nil
				})
		}()
		synctest.Wait()
		if n := started.Load(); n != 3 {
			t.Fatalf("started %d tasks while the upstream is blocked, want 3", n)
		}
		if n := src.pulled.Load(); n != 3 {
			t.Fatalf("pulled %d inputs, want 3", n)
		}
		if n := src.live(); n != 3 {
			t.Fatalf("%d inputs reachable, want the 3 held by running tasks", n)
		}
		close(release)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if len(got) != 20 {
			t.Fatalf("got %d results, want 20", len(got))
		}
		for i := range 20 {
			if got[i] != i*10 {
				t.Errorf("result %d = %d, want %d", i, got[i], i*10)
			}
		}
		if maxLive > 3 {
			t.Errorf("up to %d inputs reachable during the run, want <= 3", maxLive)
		}
		if n := src.live(); n != 0 {
			t.Errorf("%d inputs reachable after Run, want 0", n)
		}
	})
}

// Cancelling the parent while 3 tasks wait: Run returns ctx's error, pulls
// nothing more, and every task and input is gone when it returns.
func TestCancelReleasesEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		before := goleak.IgnoreCurrent()
		src := newSource(20)
		ctx, cancel := context.WithCancel(t.Context())
		var started, ended atomic.Int64
		delivered := 0
		errc := make(chan error, 1)
		go func() {
			errc <- fanout.Run(ctx, src.seq(),
				func(ctx context.Context, in *item) (int, error) {
					started.Add(1)
					defer ended.Add(1)
					<-ctx.Done() // an upstream that never answers
					return in.id, ctx.Err()
				},
				fanout.Config[*item]{Bound: 3},
				func(fanout.Result[int]) error { delivered++; return nil })
		}()
		synctest.Wait()
		if n := src.live(); n != 3 || started.Load() != 3 {
			t.Fatalf("before cancel: %d inputs reachable, %d started; want 3, 3", n, started.Load())
		}
		cancel()
		err := <-errc
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
		if e := ended.Load(); e != 3 {
			t.Errorf("%d tasks ended when Run returned, want 3", e)
		}
		if n := src.pulled.Load(); n != 3 {
			t.Errorf("pulled %d inputs, want 3 (none after cancel)", n)
		}
		if delivered != 0 {
			t.Errorf("%d results delivered after cancel, want 0", delivered)
		}
		if n := src.live(); n != 0 {
			t.Errorf("%d inputs reachable after Run returned, want 0", n)
		}
		synctest.Wait() // the goroutine that called Run exits
		goleak.VerifyNone(t, before)
	})
}

// 100 fan-outs with bound 8 share a limiter of 50. A gate keeps every
// upstream call blocked until 50 calls are in flight and every fan-out
// holds 8 tasks, so the maxima are reached, not just not exceeded.
func TestSharedLimiterBoundsUpstreamAndTasks(t *testing.T) {
	const (
		fanouts = 100
		bound   = 8
		limit   = 50
		items   = 20
	)
	l, err := shed.New(shed.Config{
		Limit:   limit,
		Classes: []shed.ClassConfig{{Name: "default", QueueDepth: fanouts * bound, MaxWait: time.Hour}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var inflight, maxInflight, totalPulled atomic.Int64
	gate := make(chan struct{})
	var once sync.Once
	check := func() {
		if totalPulled.Load() == fanouts*bound && inflight.Load() == limit {
			once.Do(func() { close(gate) })
		}
	}
	maxTasks := make([]atomic.Int64, fanouts)
	var wg sync.WaitGroup
	for f := range fanouts {
		var pulled, ended atomic.Int64
		src := newSource(items)
		src.onPull = func(int) {
			// A pull happens only with a free slot: the tasks that
			// exist afterwards are the running ones plus this one.
			maxInt64(&maxTasks[f], pulled.Add(1)-ended.Load())
			totalPulled.Add(1)
			check()
		}
		wg.Go(func() {
			n := 0
			err := fanout.Run(t.Context(), src.seq(),
				func(ctx context.Context, in *item) (int, error) {
					defer ended.Add(1)
					maxInt64(&maxInflight, inflight.Add(1))
					check()
					<-gate
					inflight.Add(-1)
					return in.id, nil
				},
				fanout.Config[*item]{Bound: bound, Limiter: l},
				func(r fanout.Result[int]) error {
					if r.Err != nil {
						t.Errorf("fan-out %d item %d: %v", f, r.Index, r.Err)
					}
					n++
					return nil
				})
			if err != nil || n != items {
				t.Errorf("fan-out %d: Run = %v with %d results, want nil with %d", f, err, n, items)
			}
		})
	}
	wg.Wait()
	if m := maxInflight.Load(); m != limit {
		t.Errorf("max upstream calls in flight = %d, want %d", m, limit)
	}
	for f := range maxTasks {
		if m := maxTasks[f].Load(); m != bound {
			t.Errorf("fan-out %d: max tasks = %d, want %d", f, m, bound)
		}
	}
	if n := l.InFlight(); n != 0 {
		t.Errorf("limiter in flight after all fan-outs = %d, want 0", n)
	}
}

// Ordered mode with item 0 slow: the others finish and wait in the reorder
// buffer, which stops the fan-out at ReorderBuffer items past the head.
func TestOrderedBufferBoundedBySlowHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, bound, buf = 20, 4, 4
		src := newSource(n)
		slow := make(chan struct{})
		delivered := atomic.Int64{}
		var maxWindow atomic.Int64
		src.onPull = func(i int) { maxInt64(&maxWindow, int64(i+1)-delivered.Load()) }
		var order []int
		errc := make(chan error, 1)
		go func() {
			errc <- fanout.Run(t.Context(), src.seq(),
				func(ctx context.Context, in *item) (int, error) {
					if in.id == 0 {
						<-slow
					}
					return in.id, nil
				},
				fanout.Config[*item]{Bound: bound, Ordered: true, ReorderBuffer: buf},
				func(r fanout.Result[int]) error {
					if r.Value != r.Index {
						t.Errorf("result %d has value %d", r.Index, r.Value)
					}
					order = append(order, r.Index)
					delivered.Add(1)
					return nil
				})
		}()
		synctest.Wait()
		if p := src.pulled.Load(); p != buf+1 {
			t.Fatalf("with the head blocked, pulled %d, want ReorderBuffer+1 = %d", p, buf+1)
		}
		if d := delivered.Load(); d != 0 {
			t.Fatalf("delivered %d results ahead of the head", d)
		}
		close(slow)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		if !slices.Equal(order, want) {
			t.Errorf("order = %v, want input order", order)
		}
		if m := maxWindow.Load(); m > buf+1 {
			t.Errorf("up to %d items undelivered, want <= %d", m, buf+1)
		}
	})
}

// A seeded property test: tasks finish in a random order chosen by the
// test, one at a time. Whatever the order, the bound and the reorder
// window hold at every pull, every index comes back exactly once, and
// ordered mode delivers in input order.
func TestRandomCompletionOrders(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := 1 + rng.IntN(40)
		bound := 1 + rng.IntN(6)
		ordered := rng.IntN(2) == 0
		buf := 0
		if ordered {
			buf = rng.IntN(8) // 0: the default, Bound
		}
		name := fmt.Sprintf("seed%d_n%d_bound%d_ordered%v_buf%d", seed, n, bound, ordered, buf)
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The same rng, past the draws above, picks the releases.
				r := newCompletionRun(rng, n, bound, ordered, buf)
				errc := r.start(t)
				for {
					synctest.Wait()
					select {
					case err := <-errc:
						r.checkResults(t, err)
						return
					default:
					}
					r.releaseOne(t)
				}
			})
		})
	}
}

// completionRun is one fan-out of TestRandomCompletionOrders: every task
// waits until the test releases it.
type completionRun struct {
	rng                       *rand.Rand
	n, bound, buf, window     int
	ordered                   bool
	src                       *source
	mu                        sync.Mutex
	waiting                   map[int]chan struct{} // started, not released
	started, ended, delivered atomic.Int64
	got                       []int
}

func newCompletionRun(rng *rand.Rand, n, bound int, ordered bool, buf int) *completionRun {
	window := buf
	if window == 0 {
		window = bound
	}
	return &completionRun{rng: rng, n: n, bound: bound, buf: buf, window: window, ordered: ordered,
		src: newSource(n), waiting: map[int]chan struct{}{}}
}

// start runs the fan-out in a goroutine and returns where its error comes.
func (r *completionRun) start(t *testing.T) <-chan error {
	r.src.onPull = func(i int) { r.checkPull(t, i) }
	errc := make(chan error, 1)
	go func() {
		errc <- fanout.Run(t.Context(), r.src.seq(), r.task,
			fanout.Config[*item]{Bound: r.bound, Ordered: r.ordered, ReorderBuffer: r.buf},
			func(res fanout.Result[int]) error {
				r.got = append(r.got, res.Index)
				r.delivered.Add(1)
				return nil
			})
	}()
	return errc
}

// checkPull checks the bound and, in ordered mode, the reorder window at
// the pull of item i.
func (r *completionRun) checkPull(t *testing.T, i int) {
	if run := r.started.Load() - r.ended.Load(); run >= int64(r.bound) {
		t.Errorf("pull %d with %d tasks running, bound %d", i, run, r.bound)
	}
	if r.ordered && int64(i)-r.delivered.Load() > int64(r.window) {
		t.Errorf("pull %d with %d delivered, window %d", i, r.delivered.Load(), r.window)
	}
}

// task waits for the test to release it.
func (r *completionRun) task(ctx context.Context, in *item) (int, error) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.waiting[in.id] = ch
	r.mu.Unlock()
	r.started.Add(1)
	<-ch
	r.ended.Add(1)
	return in.id, nil
}

// releaseOne releases a waiting task picked by the rng.
func (r *completionRun) releaseOne(t *testing.T) {
	r.mu.Lock()
	keys := make([]int, 0, len(r.waiting))
	for k := range r.waiting {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) == 0 {
		r.mu.Unlock()
		t.Fatal("no task to release and Run has not returned")
	}
	k := keys[r.rng.IntN(len(keys))]
	close(r.waiting[k])
	delete(r.waiting, k)
	r.mu.Unlock()
}

// checkResults checks that Run succeeded with every index once, in input
// order when ordered.
func (r *completionRun) checkResults(t *testing.T, err error) {
	if err != nil {
		t.Fatal(err)
	}
	got := r.got
	if len(got) != r.n {
		t.Fatalf("got %d results, want %d", len(got), r.n)
	}
	if r.ordered && !slices.IsSorted(got) {
		t.Fatalf("ordered results out of order: %v", got)
	}
	slices.Sort(got)
	for i, g := range got {
		if g != i {
			t.Fatalf("results %v: not each index once", got)
		}
	}
}

var errBoom = errors.New("boom")

// Fail fast: the first error cancels the rest, nothing more is pulled,
// and Run returns an *ItemError naming the item.
func TestFailFast(t *testing.T) {
	src := newSource(10)
	var cancelled atomic.Int64
	delivered := 0
	err := fanout.Run(t.Context(), src.seq(),
		func(ctx context.Context, in *item) (int, error) {
			if in.id == 1 {
				return 0, errBoom
			}
			<-ctx.Done() // the others wait for an upstream until cancelled
			cancelled.Add(1)
			return 0, ctx.Err()
		},
		fanout.Config[*item]{Bound: 3, FailFast: true},
		func(fanout.Result[int]) error { delivered++; return nil })
	var ie *fanout.ItemError
	if !errors.As(err, &ie) || ie.Index != 1 || !errors.Is(err, errBoom) {
		t.Fatalf("Run = %v, want *ItemError for item 1 wrapping errBoom", err)
	}
	if c := cancelled.Load(); c != 2 {
		t.Errorf("%d tasks cancelled, want 2", c)
	}
	if p := src.pulled.Load(); p != 3 {
		t.Errorf("pulled %d, want 3", p)
	}
	if delivered != 0 {
		t.Errorf("delivered %d results, want 0", delivered)
	}
}

// Without FailFast every item's error is delivered with its index.
func TestCollectErrors(t *testing.T) {
	got := map[int]error{}
	err := fanout.Run(t.Context(), slices.Values([]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}),
		func(ctx context.Context, in int) (int, error) {
			if in%2 == 1 {
				return 0, fmt.Errorf("item %d: %w", in, errBoom)
			}
			return in, nil
		},
		fanout.Config[int]{Bound: 3},
		func(r fanout.Result[int]) error { got[r.Index] = r.Err; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 {
		t.Fatalf("got %d results, want 10", len(got))
	}
	for i, e := range got {
		if (i%2 == 1) != errors.Is(e, errBoom) {
			t.Errorf("item %d: err = %v", i, e)
		}
	}
}

// A panic is the item's error, the permit is released on every path, and
// the outcomes follow DefaultOutcome.
func TestPanicsAndPermitOutcomes(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	errPanic := errors.New("panic value")
	got := map[int]fanout.Result[string]{}
	err = fanout.Run(t.Context(), slices.Values([]int{0, 1, 2, 3, 4, 5}),
		func(ctx context.Context, in int) (string, error) {
			switch in {
			case 1:
				panic("boom")
			case 2:
				panic(errPanic)
			case 3:
				runtime.Goexit()
			case 4:
				return "", context.DeadlineExceeded
			case 5:
				return "", errBoom
			}
			return "ok", nil
		},
		fanout.Config[int]{Bound: 2, Limiter: l},
		func(r fanout.Result[string]) error { got[r.Index] = r; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Value != "ok" || got[0].Err != nil {
		t.Errorf("item 0 = %+v", got[0])
	}
	var pe *fanout.PanicError
	if !errors.As(got[1].Err, &pe) || pe.Value != "boom" || !strings.Contains(string(pe.Stack), "fanout_test") {
		t.Errorf("item 1: err = %v, want *PanicError with value boom and a stack", got[1].Err)
	}
	if !errors.Is(got[2].Err, errPanic) || !errors.As(got[2].Err, &pe) {
		t.Errorf("item 2: err = %v, want a *PanicError wrapping the panic's error", got[2].Err)
	}
	if !errors.Is(got[3].Err, fanout.ErrGoexit) {
		t.Errorf("item 3: err = %v, want ErrGoexit", got[3].Err)
	}
	snap := l.Snapshot()
	if snap.InFlight != 0 {
		t.Errorf("limiter in flight = %d, want 0", snap.InFlight)
	}
	rel := snap.Classes[0].Released
	if rel[shed.Success] != 1 || rel[shed.Dropped] != 1 || rel[shed.Ignored] != 4 {
		t.Errorf("released success/dropped/ignored = %v, want [1 1 4]", rel)
	}
}

func TestDefaultOutcome(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want shed.Outcome
	}{
		{nil, shed.Success},
		{context.DeadlineExceeded, shed.Dropped},
		{fmt.Errorf("upstream: %w", context.DeadlineExceeded), shed.Dropped},
		{context.Canceled, shed.Ignored},
		{errBoom, shed.Ignored},
		{&fanout.PanicError{Value: context.DeadlineExceeded}, shed.Ignored},
	} {
		if got := fanout.DefaultOutcome(tc.err); got != tc.want {
			t.Errorf("DefaultOutcome(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// Outcome overrides the default, for example to report an upstream 503.
func TestCustomOutcome(t *testing.T) {
	l, _ := shed.New(shed.Config{Limit: 1})
	err := fanout.Run(t.Context(), slices.Values([]int{0}),
		func(ctx context.Context, in int) (int, error) { return 0, errBoom },
		fanout.Config[int]{Bound: 1, Limiter: l, Outcome: func(err error) shed.Outcome {
			if errors.Is(err, errBoom) {
				return shed.Dropped
			}
			return fanout.DefaultOutcome(err)
		}},
		nil)
	if err != nil {
		t.Fatal(err)
	}
	if rel := l.Snapshot().Classes[0].Released; rel[shed.Dropped] != 1 {
		t.Errorf("released = %v, want one drop", rel)
	}
}

// A limiter without a queue rejects at once: the rejection is the item's
// error, and fail-fast treats it like any error.
func TestLimiterRejection(t *testing.T) {
	l, _ := shed.New(shed.Config{Limit: 1})
	held, err := l.TryAcquire(shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(shed.Success)
	var ran atomic.Int64
	task := func(ctx context.Context, in int) (int, error) { ran.Add(1); return in, nil }
	var errs []error
	err = fanout.Run(t.Context(), slices.Values([]int{1, 2, 3}), task,
		fanout.Config[int]{Bound: 2, Limiter: l},
		func(r fanout.Result[int]) error { errs = append(errs, r.Err); return nil })
	if err != nil || len(errs) != 3 {
		t.Fatalf("Run = %v with %d results", err, len(errs))
	}
	for _, e := range errs {
		if !errors.Is(e, shed.ErrRejected) || shed.ReasonOf(e) != shed.ReasonLimit {
			t.Errorf("item err = %v, want a limit_exceeded rejection", e)
		}
	}
	err = fanout.Run(t.Context(), slices.Values([]int{1, 2, 3}), task,
		fanout.Config[int]{Bound: 1, Limiter: l, FailFast: true}, nil)
	var ie *fanout.ItemError
	if !errors.As(err, &ie) || ie.Index != 0 || !errors.Is(err, shed.ErrRejected) {
		t.Errorf("fail-fast Run = %v, want *ItemError for item 0 wrapping a rejection", err)
	}
	if ran.Load() != 0 {
		t.Errorf("%d tasks ran without a permit", ran.Load())
	}
}

// PermitWait bounds the wait for a queued permit: expiry is a
// queue_timeout rejection of that item. The limiter's own queue would wait
// an hour.
func TestPermitWait(t *testing.T) {
	l, _ := shed.New(shed.Config{
		Limit:   1,
		Classes: []shed.ClassConfig{{Name: "api", QueueDepth: 4, MaxWait: time.Hour}},
	})
	held, err := l.TryAcquire(shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(shed.Success)
	var got fanout.Result[int]
	err = fanout.Run(t.Context(), slices.Values([]int{7}),
		func(ctx context.Context, in int) (int, error) { return in, nil },
		fanout.Config[int]{Bound: 1, Limiter: l, PermitWait: time.Millisecond},
		func(r fanout.Result[int]) error { got = r; return nil })
	if err != nil {
		t.Fatal(err)
	}
	// The wait ends in the queue (queue_timeout), or, on a machine slow
	// enough that less than the expected wait is left when the request
	// reaches the limiter, at the door (deadline_too_short).
	var rej *shed.Rejection
	if !errors.As(got.Err, &rej) || (rej.Reason != shed.ReasonQueueTimeout && rej.Reason != shed.ReasonDeadline) || rej.ClassName != "api" {
		t.Errorf("item err = %v, want a queue_timeout (or deadline_too_short) rejection of class api", got.Err)
	}
	if n := l.Snapshot().Queued; n != 0 {
		t.Errorf("%d requests still queued", n)
	}
}

// Request gives each input its class and cost.
func TestRequestPerInput(t *testing.T) {
	l, _ := shed.New(shed.Config{Limit: 4, MaxCost: 100})
	var maxCost atomic.Int64
	err := fanout.Run(t.Context(), slices.Values([]int64{10, 60, 30}),
		func(ctx context.Context, in int64) (int64, error) {
			maxInt64(&maxCost, l.Snapshot().InFlightCost)
			return in, nil
		},
		fanout.Config[int64]{Bound: 1, Limiter: l, Request: func(in int64) shed.Request {
			return shed.Request{Cost: in}
		}},
		nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := maxCost.Load(); m != 60 {
		t.Errorf("max cost in flight = %d, want 60 (the largest input, one at a time)", m)
	}
}

// MaxItems refuses item MaxItems+1 before its task is created.
func TestMaxItems(t *testing.T) {
	for _, tc := range []struct {
		n, max  int
		wantErr bool
	}{{5, 5, false}, {6, 5, true}, {100, 5, true}, {1, 1, false}, {3, 0, false}} {
		t.Run(fmt.Sprintf("n%d_max%d", tc.n, tc.max), func(t *testing.T) {
			src := newSource(tc.n)
			var started atomic.Int64
			err := fanout.Run(t.Context(), src.seq(),
				func(ctx context.Context, in *item) (int, error) { started.Add(1); return 0, nil },
				fanout.Config[*item]{Bound: 2, MaxItems: tc.max}, nil)
			if !tc.wantErr {
				if err != nil || started.Load() != int64(tc.n) {
					t.Fatalf("Run = %v with %d tasks, want nil with %d", err, started.Load(), tc.n)
				}
				return
			}
			var tm *fanout.TooManyItemsError
			if !errors.Is(err, fanout.ErrTooManyItems) || !errors.As(err, &tm) || tm.Max != tc.max {
				t.Fatalf("Run = %v, want *TooManyItemsError{Max: %d}", err, tc.max)
			}
			if s, p := started.Load(), src.pulled.Load(); s != int64(tc.max) || p != int64(tc.max+1) {
				t.Errorf("started %d, pulled %d; want %d, %d", s, p, tc.max, tc.max+1)
			}
		})
	}
}

// An error from the consumer stops the fan-out and is returned as is.
func TestConsumerError(t *testing.T) {
	errStop := errors.New("stop")
	calls := 0
	err := fanout.Run(t.Context(), slices.Values(make([]int, 100)),
		func(ctx context.Context, in int) (int, error) { return in, nil },
		fanout.Config[int]{Bound: 4},
		func(fanout.Result[int]) error {
			calls++
			if calls == 3 {
				return errStop
			}
			return nil
		})
	if err != errStop || calls != 3 {
		t.Errorf("Run = %v after %d calls, want errStop after 3", err, calls)
	}
}

// A panic in the iterator propagates to the caller, but only after every
// task has ended: the tasks here end only when cancelled.
func TestIteratorPanicAwaitsTasks(t *testing.T) {
	var started, ended atomic.Int64
	func() {
		defer func() {
			if v := recover(); v != "iterator" {
				t.Errorf("recovered %v, want the iterator's panic", v)
			}
		}()
		_ = fanout.Run(t.Context(), func(yield func(int) bool) {
			for i := range 3 {
				if !yield(i) {
					return
				}
			}
			panic("iterator")
		},
			func(ctx context.Context, in int) (int, error) {
				started.Add(1)
				defer ended.Add(1)
				<-ctx.Done()
				return 0, nil
			},
			fanout.Config[int]{Bound: 4}, nil)
	}()
	if s, e := started.Load(), ended.Load(); s != e || s == 0 {
		t.Errorf("started %d, ended %d when the panic reached the caller", s, e)
	}
}

// The consumer's panic reaches the caller after the tasks end, also when
// tasks do finish on their own.
func TestConsumerPanicWithFinishingTasks(t *testing.T) {
	var started, ended atomic.Int64
	defer func() {
		if v := recover(); v != "consumer" {
			t.Errorf("recovered %v", v)
		}
		if s, e := started.Load(), ended.Load(); s != e || s < 2 {
			t.Errorf("started %d, ended %d when the panic reached the caller", s, e)
		}
	}()
	_ = fanout.Run(t.Context(), slices.Values(make([]int, 100)),
		func(ctx context.Context, in int) (int, error) {
			started.Add(1)
			ended.Add(1)
			return 0, nil
		},
		fanout.Config[int]{Bound: 4},
		func(fanout.Result[int]) error { panic("consumer") })
}

func TestCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	src := newSource(5)
	err := fanout.Run(ctx, src.seq(),
		func(ctx context.Context, in *item) (int, error) { return 0, nil },
		fanout.Config[*item]{Bound: 1}, nil)
	if !errors.Is(err, context.Canceled) || src.pulled.Load() != 0 {
		t.Errorf("Run = %v after %d pulls, want context.Canceled and none", err, src.pulled.Load())
	}
}

func TestInvalidArguments(t *testing.T) {
	l, _ := shed.New(shed.Config{Limit: 1})
	task := func(ctx context.Context, in int) (int, error) { return in, nil }
	items := slices.Values([]int{1})
	for _, tc := range []struct {
		field string
		cfg   fanout.Config[int]
		task  func(context.Context, int) (int, error)
		items func(func(int) bool)
	}{
		{"Bound", fanout.Config[int]{}, task, items},
		{"Bound", fanout.Config[int]{Bound: -1}, task, items},
		{"Bound", fanout.Config[int]{Bound: math.MaxInt}, task, items},
		{"Bound", fanout.Config[int]{Bound: fanout.MaxBound + 1}, task, items},
		{"ReorderBuffer", fanout.Config[int]{Bound: 1, Ordered: true, ReorderBuffer: math.MaxInt}, task, items},
		{"task", fanout.Config[int]{Bound: 1}, nil, items},
		{"items", fanout.Config[int]{Bound: 1}, task, nil},
		{"ReorderBuffer", fanout.Config[int]{Bound: 1, ReorderBuffer: 2}, task, items},
		{"ReorderBuffer", fanout.Config[int]{Bound: 1, Ordered: true, ReorderBuffer: -1}, task, items},
		{"MaxItems", fanout.Config[int]{Bound: 1, MaxItems: -1}, task, items},
		{"Len", fanout.Config[int]{Bound: 1, Len: -1}, task, items},
		{"PermitWait", fanout.Config[int]{Bound: 1, PermitWait: time.Second}, task, items},
		{"PermitWait", fanout.Config[int]{Bound: 1, Limiter: l, PermitWait: -1}, task, items},
		{"Request", fanout.Config[int]{Bound: 1, Request: func(int) shed.Request { return shed.Request{} }}, task, items},
		{"Outcome", fanout.Config[int]{Bound: 1, Outcome: fanout.DefaultOutcome}, task, items},
	} {
		err := fanout.Run(t.Context(), tc.items, tc.task, tc.cfg, nil)
		if !errors.Is(err, fanout.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: Run = %v, want ErrInvalidConfig naming the field", tc.field, err)
		}
	}
}

func TestErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&fanout.TooManyItemsError{Max: 3}, "fanout: too many items: more than 3"},
		{&fanout.TooManyItemsError{Max: 3, Len: 7}, "fanout: too many items: 7, more than 3"},
		{&fanout.ItemError{Index: 2, Err: errBoom}, "fanout: item 2: boom"},
		{&fanout.PanicError{Value: "x"}, "fanout: task panicked: x"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

// TestBuffersFollowMaxItems: Run's buffers hold Bound results, or
// MaxItems when that is smaller: a fan-out of three items at the largest
// Bound allocates for three.
func TestBuffersFollowMaxItems(t *testing.T) {
	task := func(ctx context.Context, in int) (int, error) { return in, nil }
	items := slices.Values([]int{1, 2, 3})
	for _, ordered := range []bool{false, true} {
		cfg := fanout.Config[int]{Bound: fanout.MaxBound, MaxItems: 3, Ordered: ordered}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := fanout.Run(t.Context(), items, task, cfg, nil); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if grown := after.TotalAlloc - before.TotalAlloc; grown > 1<<16 {
			t.Errorf("ordered %v: %d bytes allocated for three items", ordered, grown)
		}
	}
}

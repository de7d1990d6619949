package grpc_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/shed"
)

// TestOverloadProtectsInteractive offers a real server 3x the load it can
// serve, open loop (arrivals do not wait for answers): one sixth of it to
// an interactive method (half the capacity), the rest to a batch method.
// Interactive calls must keep at least 95% success while batch calls
// absorb the shedding, each with a pushback trailer.
//
// The 95% assumes the capacity the test is sized for. A starved machine
// (two CPU hogs, the race detector) stretches the 40 ms of work, and with
// it the interactive share grows towards all of the capacity: interactive
// success fell to 87-93% in 4 runs of 60, in which the server completed
// about 100 calls instead of about 150. So, as the soak does with its
// timing checks, the 95% is enforced when the work took at most 25%
// longer than asked on average and no call's took longer than an
// interactive call may wait in the queue (a stall that long times the
// queue out whatever the limiter does), and only reported otherwise. That
// interactive calls fare far better than batch ones is enforced always:
// it is what protection means, however slow the machine.
func TestOverloadProtectsInteractive(t *testing.T) {
	const (
		limit    = 6
		work     = 40 * time.Millisecond  // capacity: limit/work = 150 calls/s
		interval = 2 * time.Millisecond   // 500 arrivals/s...
		arrivals = 500                    // ...for 1 s: 3.3x capacity
		maxWait  = 250 * time.Millisecond // of the interactive calls in the queue
	)
	lim := newLimiter(t, shed.Config{Limit: limit, Classes: []shed.ClassConfig{
		{Name: "interactive", Protected: 0.6, QueueDepth: 20, MaxWait: maxWait},
		{Name: "batch"},
	}})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Methods: map[string]string{mInteract: "interactive", mBatch: "batch"}})
	var worked, works, longest atomic.Int64 // how long the completed work took: in all, and at most
	cc := serve(t, &service{unary: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		began := time.Now()
		select {
		case <-time.After(work):
			d := int64(time.Since(began))
			worked.Add(d)
			works.Add(1)
			for m := longest.Load(); d > m && !longest.CompareAndSwap(m, d); m = longest.Load() {
			}
			return in, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}, s.ServerOptions())

	inter, batch := offerCalls(t, cc, arrivals, interval)
	iOK, iAll := inter.ok.Load(), inter.ok.Load()+inter.shed.Load()+inter.other.Load()
	bOK, bAll := batch.ok.Load(), batch.ok.Load()+batch.shed.Load()+batch.other.Load()
	effective, slowest := time.Duration(worked.Load()/max(works.Load(), 1)), time.Duration(longest.Load())
	t.Logf("interactive %d/%d ok, batch %d/%d ok, batch shed with pushback %d; %v of work took %v on average, %v at most",
		iOK, iAll, bOK, bAll, batch.pushback.Load(), work, effective, slowest)
	iShare, bShare := float64(iOK)/float64(max(iAll, 1)), float64(bOK)/float64(max(bAll, 1))
	switch {
	case iShare >= 0.95:
	case effective > work*5/4 || slowest > maxWait:
		t.Logf("starved of CPU (%v of work took %v on average, %v at most): interactive success %d/%d, under 95%%, not enforced",
			work, effective, slowest, iOK, iAll)
	default:
		t.Errorf("interactive success %d/%d, want >= 95%%", iOK, iAll)
	}
	if iShare < 2*bShare {
		t.Errorf("interactive success %.0f%%, batch %.0f%%: interactive calls are not protected", 100*iShare, 100*bShare)
	}
	if float64(bOK) > 0.6*float64(bAll) {
		t.Errorf("batch success %d/%d: batch did not absorb the overload", bOK, bAll)
	}
	if batch.shed.Load() == 0 || batch.pushback.Load() != batch.shed.Load() {
		t.Errorf("batch shed %d, with pushback %d: every shed call needs a pushback", batch.shed.Load(), batch.pushback.Load())
	}
	if n := lim.InFlight(); n != 0 {
		t.Errorf("in flight %d after the run", n)
	}
}

// callTally counts the outcomes of one class's calls.
type callTally struct{ ok, shed, pushback, other atomic.Int64 }

// offerCalls makes n calls on cc, one every interval, a sixth of them
// interactive and the rest batch, and returns each class's tally once
// all have returned.
func offerCalls(t *testing.T, cc *grpc.ClientConn, n int, interval time.Duration) (inter, batch *callTally) {
	t.Helper()
	inter, batch = new(callTally), new(callTally)
	var wg sync.WaitGroup
	ctx := testCtx(t)
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		method, tl := mBatch, batch
		if i%6 == 0 { // 83 calls/s: about half the capacity
			method, tl = mInteract, inter
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			var tr metadata.MD
			_, err := call(cctx, cc, method, "x", grpc.Trailer(&tr))
			switch status.Code(err) {
			case codes.OK:
				tl.ok.Add(1)
			case codes.Unavailable:
				tl.shed.Add(1)
				if len(tr.Get(shedgrpc.PushbackKey)) == 1 {
					tl.pushback.Add(1)
				}
			default:
				tl.other.Add(1)
				t.Errorf("%s: %v", method, err)
			}
		})
	}
	wg.Wait()
	return inter, batch
}

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
// absorb the shedding, each with a pushback trailer. The figures are
// counts, not timings: a slow machine serves fewer calls of each kind, it
// does not change which class is protected.
func TestOverloadProtectsInteractive(t *testing.T) {
	const (
		limit    = 6
		work     = 40 * time.Millisecond // capacity: limit/work = 150 calls/s
		interval = 2 * time.Millisecond  // 500 arrivals/s...
		arrivals = 500                   // ...for 1 s: 3.3x capacity
	)
	lim := newLimiter(t, shed.Config{Limit: limit, Classes: []shed.ClassConfig{
		{Name: "interactive", Protected: 0.6, QueueDepth: 20, MaxWait: 250 * time.Millisecond},
		{Name: "batch"},
	}})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Methods: map[string]string{mInteract: "interactive", mBatch: "batch"}})
	cc := serve(t, &service{unary: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		select {
		case <-time.After(work):
			return in, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}, s.ServerOptions())

	type tally struct{ ok, shed, pushback, other atomic.Int64 }
	var inter, batch tally
	var wg sync.WaitGroup
	ctx := testCtx(t)
	start := time.Now()
	for i := range arrivals {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		method, tl := mBatch, &batch
		if i%6 == 0 { // 83 calls/s: about half the capacity
			method, tl = mInteract, &inter
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
	iOK, iAll := inter.ok.Load(), inter.ok.Load()+inter.shed.Load()+inter.other.Load()
	bOK, bAll := batch.ok.Load(), batch.ok.Load()+batch.shed.Load()+batch.other.Load()
	t.Logf("interactive %d/%d ok, batch %d/%d ok, batch shed with pushback %d", iOK, iAll, bOK, bAll, batch.pushback.Load())
	if float64(iOK) < 0.95*float64(iAll) {
		t.Errorf("interactive success %d/%d, want >= 95%%", iOK, iAll)
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

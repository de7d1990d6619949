package main

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// giveUpHeader carries, in Unix nanoseconds, when the load generator
// gives up on an attempt. It is the demo's measuring tape, not deadline
// propagation: the protected gateway reads the client's deadline from
// deadlineHeader, which only the protected clients send.
const giveUpHeader = "X-Demo-Give-Up"

// paths the load generator calls on the gateway, one per class: the
// gateway classifies by route, never by a client header.
var classPaths = [numClasses]string{"/api/search", "/api/report"}

// loadgen sends open-loop Poisson traffic of both classes to the gateway.
// Each logical request has a deadline; it is good when it is answered 2xx
// within it. Every attempt also tells the gateway, in giveUpHeader, when
// this client stops waiting for it: for measurement only (the gateway
// counts the answers it finishes after that), never for decisions.
type loadgen struct {
	base      string
	client    *http.Client
	naive     int // unprotected clients: extra attempts on any failure, each with a full timeout
	rates     [numClasses]float64
	deadlines [numClasses]time.Duration
	rec       *recorder
	logical   atomic.Int64
	wg        sync.WaitGroup
}

// run sends traffic until ctx ends, then waits for the requests in flight.
func (g *loadgen) run(ctx context.Context, seed uint64) {
	var arrivals sync.WaitGroup
	for c := 0; c < numClasses; c++ {
		if g.rates[c] <= 0 {
			continue
		}
		arrivals.Add(1)
		go func(c int) {
			defer arrivals.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			next := time.Now()
			for {
				next = next.Add(time.Duration(rng.ExpFloat64() / g.rates[c] * float64(time.Second)))
				t := time.NewTimer(time.Until(next))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				g.wg.Add(1)
				go g.one(c)
			}
		}(c)
	}
	arrivals.Wait()
	g.wg.Wait()
}

// one sends one logical request of class c.
func (g *loadgen) one(c int) {
	defer g.wg.Done()
	start := time.Now()
	g.logical.Add(1)
	g.rec.offered(start, c)
	deadline := g.deadlines[c]
	out := outFailed
	for attempt := 0; attempt <= g.naive; attempt++ {
		// Protected clients give the whole request one deadline; naive ones
		// give every attempt a full timeout, as hand-written retry loops do.
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		if g.naive == 0 {
			ctx, cancel = context.WithDeadline(context.Background(), start.Add(deadline))
		}
		out = g.attempt(ctx, c)
		cancel()
		if out == outOK || (out == outShed && g.naive == 0) {
			break
		}
	}
	end := time.Now()
	g.rec.done(start, end, c, out, out == outOK && end.Sub(start) <= deadline)
}

func (g *loadgen) attempt(ctx context.Context, c int) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+classPaths[c], nil)
	if err != nil {
		return outFailed
	}
	if dl, ok := ctx.Deadline(); ok {
		req.Header.Set(giveUpHeader, strconv.FormatInt(dl.UnixNano(), 10))
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return outFailed
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		return outOK
	case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests:
		return outShed
	}
	return outFailed
}

package shedredis

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

// A lease released while the renewer's pipeline is on its way must not be
// written back by that renewal: the released member would count against the
// tenant for a whole LeaseTTL with nothing left to remove it.
func TestReleaseDuringRenewalNotResurrected(t *testing.T) {
	p := startRedis(t)
	client := p.client(t)
	const ttl = 300 * time.Millisecond // renewals every 100 ms
	c, err := NewConcurrency(Config{Client: client, Replicas: 1, Timeout: 30 * time.Millisecond, LeaseTTL: ttl, BreakerFailures: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "k" + string(rune('a'+w%2))
			for time.Now().Before(stop) {
				l, err := c.Acquire(t.Context(), key, 1000)
				if err != nil {
					continue
				}
				time.Sleep(time.Duration(1000+w*300) * time.Microsecond)
				l.Release()
			}
		}()
	}
	wg.Wait()
	// Leave a renewal in flight time to end (and a failed one's orphans
	// the next renewal): what is still live then was written back.
	time.Sleep(ttl / 2)
	// Everything is released: Redis must hold no live lease. The script
	// drops only expired members, so look at the live ones.
	now, err := client.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	ms := now.UnixMilli()
	for _, k := range []string{"ka", "kb"} {
		n, err := client.ZCount(t.Context(), c.key(k), "("+strconv.FormatInt(ms, 10), "+inf").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("key %s: %d live leases in Redis after every lease was released", k, n)
		}
	}
}

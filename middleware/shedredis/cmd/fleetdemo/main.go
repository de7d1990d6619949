// Command fleetdemo runs three replicas of a service that share their
// tenant quotas through one Redis (package shedredis), offers them a noisy
// tenant and ten quiet ones, kills Redis midway and starts it again, and
// prints what the tenants got each second.
//
//	go run ./cmd/fleetdemo            # starts its own redis-server
//	go run ./cmd/fleetdemo -addr 127.0.0.1:6379
//
// The quota is 200 requests/s per tenant (burst 20) and 20 in flight per
// tenant, shared by the fleet. The noisy tenant offers 600/s over the
// three replicas; each quiet tenant 20/s. While Redis is down every
// replica enforces its third of each quota; no request fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/middleware/shedredis"
	"github.com/shedkit/shedkit/shed"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func main() {
	addr := flag.String("addr", "", "an existing Redis to use (host:port); empty: start redis-server on a free port (and kill it midway)")
	phase := flag.Duration("phase", 5*time.Second, "length of each phase: shared, Redis down, Redis back")
	flag.Parse()
	redis.SetLogger(quietLogger{}) // the demo kills Redis on purpose
	if err := run(*addr, *phase); err != nil {
		log.Fatal(err)
	}
}

// server is a redis-server the demo started.
type server struct {
	bin, dir string
	port     int
	cmd      *exec.Cmd
}

func (s *server) start() error {
	s.cmd = exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir, "--logfile", "")
	if err := s.cmd.Start(); err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	for range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("redis-server did not answer PING")
}

func (s *server) kill() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

type counts struct{ ok, limited, failed atomic.Int64 }

func run(addr string, phase time.Duration) error {
	var srv *server
	if addr == "" {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return fmt.Errorf("redis-server not found (make redis installs it), or pass -addr: %w", err)
		}
		dir, err := os.MkdirTemp("", "fleetdemo")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		srv = &server{bin: bin, dir: dir, port: port}
		if err := srv.start(); err != nil {
			return err
		}
		defer srv.kill()
		addr = srv.addr()
	}

	var urls []string
	var stores []*shedredis.Store
	for i := range 3 {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer rdb.Close()
		cfg := shedredis.Config{Client: rdb, Replicas: 3, Timeout: 20 * time.Millisecond, Name: "replica-" + strconv.Itoa(i)}
		store, err := shedredis.NewStore(cfg)
		if err != nil {
			return err
		}
		stores = append(stores, store)
		conc, err := shedredis.NewConcurrency(cfg)
		if err != nil {
			return err
		}
		defer conc.Close()
		lim, err := shed.New(shed.Config{Limit: 1000})
		if err != nil {
			return err
		}
		admission, err := nethttp.New(nethttp.Config{
			Options: shedhttp.Options{
				Limiter:    lim,
				KeyHeader:  "X-Tenant",
				RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 200, Burst: 20}},
				KeyStore:   store,
			},
		})
		if err != nil {
			return err
		}
		perTenant, err := shedredis.ConcurrencyMiddleware(shedredis.MiddlewareConfig{
			Concurrency: conc,
			Key:         func(r *http.Request) string { return r.Header.Get("X-Tenant") },
			Limit:       20,
		})
		if err != nil {
			return err
		}
		app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(2 * time.Millisecond) })
		hs := httptest.NewServer(perTenant(admission(app)))
		defer hs.Close()
		urls = append(urls, hs.URL)
	}

	tr := &http.Transport{MaxIdleConnsPerHost: 512}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var noisy, quiet counts
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	offer := func(tenant string, rate float64, n *counts) {
		defer wg.Done()
		interval := time.Duration(float64(time.Second) / rate)
		start := time.Now()
		for i := 0; ctx.Err() == nil; i++ {
			time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
			wg.Add(1)
			go func(u string) {
				defer wg.Done()
				req, _ := http.NewRequest("GET", u, nil)
				req.Header.Set("X-Tenant", tenant)
				resp, err := client.Do(req)
				if err != nil {
					n.failed.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					n.ok.Add(1)
				case http.StatusTooManyRequests:
					n.limited.Add(1)
				default:
					n.failed.Add(1)
				}
			}(urls[i%len(urls)])
		}
	}
	wg.Add(11)
	go offer("noisy", 600, &noisy)
	for i := range 10 {
		go offer("quiet-"+strconv.Itoa(i), 20, &quiet)
	}

	fmt.Println("quota 200/s and 20 in flight per tenant, shared by 3 replicas; noisy offers 600/s, 10 quiet tenants 20/s each")
	fmt.Printf("%-6s %-12s %13s %15s %9s %10s\n", "second", "phase", "noisy ok/s", "quiet admitted", "failed", "fallbacks")
	var lastFB uint64
	sec := 0
	report := func(name string, d time.Duration) {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			time.Sleep(time.Second)
			sec++
			nOK := noisy.ok.Swap(0)
			noisy.limited.Swap(0)
			qOK, qLim := quiet.ok.Swap(0), quiet.limited.Swap(0)
			failed := noisy.failed.Swap(0) + quiet.failed.Swap(0)
			var fb uint64
			for _, s := range stores {
				fb += s.Stats().FellBack
			}
			fmt.Printf("%-6d %-12s %13d %14.1f%% %9d %10d\n", sec, name, nOK, 100*float64(qOK)/float64(max(qOK+qLim, 1)), failed, fb-lastFB)
			lastFB = fb
		}
	}
	report("shared", phase)
	if srv != nil {
		srv.kill()
		report("redis down", phase)
		if err := srv.start(); err != nil {
			cancel()
			wg.Wait()
			return err
		}
		report("redis back", phase)
	}
	cancel()
	wg.Wait()
	return nil
}

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

// run starts Redis (unless addr is given), three replicas and the
// tenants' load, then prints each second of the three phases.
func run(addr string, phase time.Duration) error {
	var srv *server
	if addr == "" {
		s, cleanup, err := startOwnRedis()
		if err != nil {
			return err
		}
		defer cleanup()
		srv = s
		addr = srv.addr()
	}

	var closers cleanups
	defer closers.run()
	var urls []string
	var stores []*shedredis.Store
	for i := range 3 {
		url, store, err := startReplica(addr, i, &closers)
		if err != nil {
			return err
		}
		stores = append(stores, store)
		urls = append(urls, url)
	}

	tr := &http.Transport{MaxIdleConnsPerHost: 512}
	defer tr.CloseIdleConnections()
	l := &load{client: &http.Client{Transport: tr, Timeout: 5 * time.Second}, urls: urls}
	ctx, cancel := context.WithCancel(context.Background())
	l.wg.Add(11)
	go l.offer(ctx, "noisy", 600, &l.noisy)
	for i := range 10 {
		go l.offer(ctx, "quiet-"+strconv.Itoa(i), 20, &l.quiet)
	}

	fmt.Println("quota 200/s and 20 in flight per tenant, shared by 3 replicas; noisy offers 600/s, 10 quiet tenants 20/s each")
	fmt.Printf("%-6s %-12s %13s %15s %9s %10s\n", "second", "phase", "noisy ok/s", "quiet admitted", "failed", "fallbacks")
	err := runPhases(srv, &secondReport{stores: stores, load: l}, phase)
	cancel()
	l.wg.Wait()
	return err
}

// startOwnRedis starts a redis-server on a free port with a temporary
// directory; cleanup kills it and removes the directory.
func startOwnRedis() (srv *server, cleanup func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, nil, fmt.Errorf("redis-server not found (make redis installs it), or pass -addr: %w", err)
	}
	dir, err := os.MkdirTemp("", "fleetdemo")
	if err != nil {
		return nil, nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv = &server{bin: bin, dir: dir, port: port}
	if err := srv.start(); err != nil {
		srv.kill() // started but silent: do not leave it running
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return srv, func() {
		srv.kill()
		os.RemoveAll(dir)
	}, nil
}

// cleanups is a stack of close functions, run last first like defers.
type cleanups []func()

// add pushes f onto the stack.
func (c *cleanups) add(f func()) { *c = append(*c, f) }

// run calls the functions, the last added first.
func (c cleanups) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// startReplica starts replica i, sharing its quotas through the Redis at
// addr, and returns its URL and its rate-limit store; what it opens is
// added to closers.
func startReplica(addr string, i int, closers *cleanups) (url string, store *shedredis.Store, err error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	closers.add(func() { _ = rdb.Close() })
	cfg := shedredis.Config{Client: rdb, Replicas: 3, Timeout: 20 * time.Millisecond, Name: "replica-" + strconv.Itoa(i)}
	store, err = shedredis.NewStore(cfg)
	if err != nil {
		return "", nil, err
	}
	conc, err := shedredis.NewConcurrency(cfg)
	if err != nil {
		return "", nil, err
	}
	closers.add(func() { _ = conc.Close() })
	handler, err := replicaHandler(store, conc)
	if err != nil {
		return "", nil, err
	}
	hs := httptest.NewServer(handler)
	closers.add(hs.Close)
	return hs.URL, store, nil
}

// replicaHandler is a replica's service: 20 in flight per tenant (conc),
// then a rate limit of 200/s per tenant (store), in front of a 2ms handler.
func replicaHandler(store *shedredis.Store, conc *shedredis.Concurrency) (http.Handler, error) {
	lim, err := shed.New(shed.Config{Limit: 1000})
	if err != nil {
		return nil, err
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
		return nil, err
	}
	perTenant, err := shedredis.ConcurrencyMiddleware(shedredis.MiddlewareConfig{
		Concurrency: conc,
		Key:         func(r *http.Request) string { return r.Header.Get("X-Tenant") },
		Limit:       20,
	})
	if err != nil {
		return nil, err
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(2 * time.Millisecond) })
	return perTenant(admission(app)), nil
}

// load offers the tenants' requests to the replicas in turn and counts
// the answers of the noisy tenant and of the quiet ones.
type load struct {
	client       *http.Client
	urls         []string
	wg           sync.WaitGroup
	noisy, quiet counts
}

// offer sends tenant's requests at rate per second, each from a goroutine
// of its own, until ctx ends.
func (l *load) offer(ctx context.Context, tenant string, rate float64, n *counts) {
	defer l.wg.Done()
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		l.wg.Add(1)
		go l.send(l.urls[i%len(l.urls)], tenant, n)
	}
}

// send sends one request of tenant to u and counts its answer in n.
func (l *load) send(u, tenant string, n *counts) {
	defer l.wg.Done()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("X-Tenant", tenant)
	resp, err := l.client.Do(req)
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
}

// runPhases runs the phases: shared quotas, then, with a Redis of its
// own, Redis down and Redis back.
func runPhases(srv *server, rep *secondReport, phase time.Duration) error {
	rep.phase("shared", phase)
	if srv != nil {
		srv.kill()
		rep.phase("redis down", phase)
		if err := srv.start(); err != nil {
			return err
		}
		rep.phase("redis back", phase)
	}
	return nil
}

// secondReport prints one line a second: what the tenants got and how
// many times the replicas fell back to their local share.
type secondReport struct {
	stores []*shedredis.Store
	load   *load
	sec    int
	lastFB uint64
}

// phase prints the lines of a phase of length d.
func (p *secondReport) phase(name string, d time.Duration) {
	noisy, quiet := &p.load.noisy, &p.load.quiet
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		time.Sleep(time.Second)
		p.sec++
		nOK := noisy.ok.Swap(0)
		noisy.limited.Swap(0)
		qOK, qLim := quiet.ok.Swap(0), quiet.limited.Swap(0)
		failed := noisy.failed.Swap(0) + quiet.failed.Swap(0)
		var fb uint64
		for _, s := range p.stores {
			fb += s.Stats().FellBack
		}
		fmt.Printf("%-6d %-12s %13d %14.1f%% %9d %10d\n", p.sec, name, nOK, 100*float64(qOK)/float64(max(qOK+qLim, 1)), failed, fb-p.lastFB)
		p.lastFB = fb
	}
}

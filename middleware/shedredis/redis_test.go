package shedredis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The tests kill and pause Redis on purpose: go-redis's log of every
	// failed dial would bury the test output.
	redis.SetLogger(quietLogger{})
	goleak.VerifyTestMain(m)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// redisProc is a redis-server the test started on a free 127.0.0.1 port,
// without persistence.
type redisProc struct {
	t      testing.TB
	bin    string
	dir    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// startRedis starts redis-server for t and stops it when t ends. It skips
// t when redis-server is not installed, unless SHEDKIT_REQUIRE_REDIS=1.
func startRedis(t testing.TB) *redisProc {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found in PATH: install Debian's redis-server (make redis) to run the Redis tests"
		if os.Getenv("SHEDKIT_REQUIRE_REDIS") == "1" {
			t.Fatal(msg + " (SHEDKIT_REQUIRE_REDIS=1)")
		}
		t.Skip(msg + "; set SHEDKIT_REQUIRE_REDIS=1 to fail instead")
	}
	p := &redisProc{t: t, bin: bin, dir: t.TempDir()}
	var last error
	for range 5 {
		p.port = freePort(t)
		if last = p.start(); last == nil {
			t.Cleanup(p.stop)
			return p
		}
	}
	t.Fatalf("redis-server did not start: %v", last)
	return nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (p *redisProc) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// start runs redis-server on p.port and waits until it answers PING.
func (p *redisProc) start() error {
	cmd := exec.Command(p.bin, "--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", p.dir, "--logfile", "")
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited", p.port)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.kill()
	return fmt.Errorf("redis-server on port %d did not answer PING within 5 s", p.port)
}

// kill ends redis-server at once (SIGKILL) and waits for it to exit.
func (p *redisProc) kill() {
	if p.cmd == nil {
		return
	}
	if p.paused {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		p.paused = false
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
}

// restart starts redis-server again on the same port, empty.
func (p *redisProc) restart() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *redisProc) pause() {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		p.t.Fatal(err)
	}
	p.paused = true
}

func (p *redisProc) resume() {
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		p.t.Fatal(err)
	}
	p.paused = false
}

func (p *redisProc) stop() { p.kill() }

// client returns a client of p, closed when the test ends.
func (p *redisProc) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.addr(), ContextTimeoutEnabled: true, PoolSize: 32})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

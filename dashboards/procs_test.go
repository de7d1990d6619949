//go:build dashboards && linux

package dashboards

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// procs are the processes a test started. Every one of them is stopped
// when the test ends, whether it passes, fails or times out:
//   - t.Cleanup stops them at the end of the test, failed or not;
//   - an interrupt or SIGTERM (Ctrl-C, a CI job cancelled) stops them
//     before the test binary exits, as a shell trap would;
//   - Pdeathsig has the kernel kill them if the test binary dies without
//     cleaning up (go test's -timeout panic, SIGKILL).
type procs struct {
	t    *testing.T
	dir  string // the test's temporary directory, removed on a signal too
	mu   sync.Mutex
	list []*proc
}

type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	stopSig syscall.Signal // the signal that asks for a graceful exit
	done    chan struct{}  // closed when the process has exited
	err     error          // its exit status, once done
	once    sync.Once
}

func newProcs(t *testing.T, dir string) *procs {
	ps := &procs{t: t, dir: dir}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	stopTrap := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "dashboards: %v: stopping the processes the check started\n", s)
			ps.stopAll()
			os.RemoveAll(ps.dir) // os.Exit skips the test's own cleanup
			os.Exit(2)
		case <-stopTrap:
		}
	}()
	t.Cleanup(func() {
		signal.Stop(sigs)
		close(stopTrap)
		ps.stopAll()
		if t.Failed() {
			for _, p := range ps.list {
				t.Logf("last lines of the %s log (%s):\n%s", p.name, p.logPath, tail(p.logPath, 40))
			}
		}
	})
	return ps
}

// start starts bin in its own process group, its output in logPath.
// onLine, when set, sees every line the process writes to stdout.
func (ps *procs) start(name, logPath string, stopSig syscall.Signal, onLine func(string), bin string, args ...string) *proc {
	ps.t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		ps.t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = log
	var out io.ReadCloser
	if onLine == nil {
		cmd.Stdout = log
	} else if out, err = cmd.StdoutPipe(); err != nil {
		ps.t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, stopSig: stopSig, done: make(chan struct{})}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := cmd.Start(); err != nil {
		log.Close()
		ps.t.Fatalf("starting %s: %v", name, err)
	}
	ps.list = append(ps.list, p)
	go func() {
		if out != nil {
			// Wait must not be called before the pipe is drained.
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				fmt.Fprintln(log, sc.Text())
				onLine(sc.Text())
			}
		}
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process group to exit, and kills it after 10 s.
func (p *proc) stop() {
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, p.stopSig)
		select {
		case <-p.done:
			return
		case <-time.After(10 * time.Second):
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	})
}

func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := append([]*proc(nil), ps.list...)
	ps.mu.Unlock()
	// The last started first: the demo before the Prometheus scraping it.
	for i := len(list) - 1; i >= 0; i-- {
		list[i].stop()
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Command soak runs the loopback soak of package soak: the server soak (a
// net/http server with shedkit's middleware and an adaptive limit in front
// of an upstream that slows down mid-run, attacked by vegeta at 10x the
// upstream's capacity), the client soak (the retrying client against an
// upstream that fails 100% for a while) and the hostile soak (normal
// traffic while slow uploaders, clients that leave mid-request and
// mid-stream, percent-encoded paths, idle upgraded connections and an
// upstream with endless 503 bodies attack the service). It prints the
// figures and a PASS or FAIL line per check, and exits 1 when a check
// fails.
//
//	cd bench
//	go run ./cmd/soak -duration 60s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/shedkit/shedkit/bench/soak"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the soaks the flags select, in turn, and returns the exit
// code: 0 when every check passed, 1 when one failed, 2 on a usage or
// configuration error.
func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	rp := &reporter{stdout: stdout, stderr: stderr}
	if opts.server {
		if !rp.report(soak.Run(ctx, opts.serverConfig(stderr))) {
			return 2
		}
	}
	if opts.client && ctx.Err() == nil {
		if !rp.report(soak.RunClient(ctx, opts.clientConfig())) {
			return 2
		}
	}
	if opts.hostile && ctx.Err() == nil {
		if !rp.report(soak.RunHostile(ctx, opts.hostileConfig(stderr))) {
			return 2
		}
	}
	if rp.failed {
		fmt.Fprintln(stdout, "FAIL")
		return 1
	}
	fmt.Fprintln(stdout, "PASS")
	return 0
}

// options are the command's flags.
type options struct {
	duration, clientDuration, hostileDuration time.Duration
	rate, capacity, workers                   int
	overload                                  float64
	service                                   time.Duration
	server, client, resets, hostile, quiet    bool
}

// parseFlags parses args into options; errors and usage go to stderr.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", soak.DefaultDuration, "server soak duration (at least 6s)")
	fs.DurationVar(&o.clientDuration, "client-duration", 0, "client soak duration (default: duration/3, at least 5s)")
	fs.IntVar(&o.rate, "rate", 0, "offered rate in requests per second (default: overload x capacity / service time)")
	fs.Float64Var(&o.overload, "overload", soak.DefaultOverload, "offered rate as a multiple of the upstream's capacity")
	fs.IntVar(&o.capacity, "capacity", soak.DefaultCapacity, "upstream workers")
	fs.DurationVar(&o.service, "service", soak.DefaultServiceTime, "upstream healthy service time")
	fs.IntVar(&o.workers, "workers", soak.DefaultWorkers, "load generator workers")
	fs.BoolVar(&o.server, "server", true, "run the server soak")
	fs.BoolVar(&o.client, "client", true, "run the client soak")
	fs.BoolVar(&o.resets, "client-resets", false, "client soak: the upstream resets connections during the outage instead of answering 503")
	fs.BoolVar(&o.hostile, "hostile", true, "run the hostile-client soak")
	fs.DurationVar(&o.hostileDuration, "hostile-duration", 0, "hostile soak duration (default: duration/2, at least 8s)")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines")
	err := fs.Parse(args)
	return o, err
}

// serverConfig is the server soak's configuration from the flags.
func (o options) serverConfig(stderr io.Writer) soak.Config {
	cfg := soak.Config{
		Duration: o.duration, Rate: o.rate, Overload: o.overload,
		Capacity: o.capacity, ServiceTime: o.service, Workers: o.workers,
	}
	if !o.quiet {
		cfg.Logf = progress(stderr)
	}
	return cfg
}

// clientConfig is the client soak's configuration from the flags; its
// duration defaults to a third of the server soak's, at least 5s.
func (o options) clientConfig() soak.ClientConfig {
	d := o.clientDuration
	if d == 0 {
		d = max(5*time.Second, o.duration/3)
	}
	return soak.ClientConfig{Duration: d, OutageReset: o.resets}
}

// hostileConfig is the hostile soak's configuration from the flags; its
// duration defaults to half the server soak's, at least 8s.
func (o options) hostileConfig(stderr io.Writer) soak.HostileConfig {
	d := o.hostileDuration
	if d == 0 {
		d = max(8*time.Second, o.duration/2)
	}
	cfg := soak.HostileConfig{Duration: d}
	if !o.quiet {
		cfg.Logf = progress(stderr)
	}
	return cfg
}

// progress returns a Logf that writes one progress line to w.
func progress(w io.Writer) func(format string, a ...any) {
	return func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
}

// reporter prints each soak's report and remembers whether any failed.
type reporter struct {
	stdout, stderr io.Writer
	failed         bool
}

// report prints a soak's report and notes a failure; it returns false
// on a configuration error (exit 2).
func (p *reporter) report(rep interface {
	io.WriterTo
	Check() error
}, err error) bool {
	if err != nil {
		fmt.Fprintln(p.stderr, "soak:", err)
		if errors.Is(err, soak.ErrInvalidConfig) {
			return false
		}
		p.failed = true
	}
	_, _ = rep.WriteTo(p.stdout)
	if rep.Check() != nil {
		p.failed = true
	}
	return true
}

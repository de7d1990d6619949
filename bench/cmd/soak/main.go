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

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", soak.DefaultDuration, "server soak duration (at least 6s)")
	clientDuration := fs.Duration("client-duration", 0, "client soak duration (default: duration/3, at least 5s)")
	rate := fs.Int("rate", 0, "offered rate in requests per second (default: overload x capacity / service time)")
	overload := fs.Float64("overload", soak.DefaultOverload, "offered rate as a multiple of the upstream's capacity")
	capacity := fs.Int("capacity", soak.DefaultCapacity, "upstream workers")
	service := fs.Duration("service", soak.DefaultServiceTime, "upstream healthy service time")
	workers := fs.Int("workers", soak.DefaultWorkers, "load generator workers")
	server := fs.Bool("server", true, "run the server soak")
	client := fs.Bool("client", true, "run the client soak")
	resets := fs.Bool("client-resets", false, "client soak: the upstream resets connections during the outage instead of answering 503")
	hostile := fs.Bool("hostile", true, "run the hostile-client soak")
	hostileDuration := fs.Duration("hostile-duration", 0, "hostile soak duration (default: duration/2, at least 8s)")
	quiet := fs.Bool("quiet", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	failed := false
	// report prints a soak's report and notes a failure; it returns false
	// on a configuration error (exit 2).
	report := func(rep interface {
		io.WriterTo
		Check() error
	}, err error) bool {
		if err != nil {
			fmt.Fprintln(stderr, "soak:", err)
			if errors.Is(err, soak.ErrInvalidConfig) {
				return false
			}
			failed = true
		}
		_, _ = rep.WriteTo(stdout)
		if rep.Check() != nil {
			failed = true
		}
		return true
	}
	if *server {
		cfg := soak.Config{
			Duration: *duration, Rate: *rate, Overload: *overload,
			Capacity: *capacity, ServiceTime: *service, Workers: *workers,
		}
		if !*quiet {
			cfg.Logf = func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
		}
		if !report(soak.Run(ctx, cfg)) {
			return 2
		}
	}
	if *client && ctx.Err() == nil {
		d := *clientDuration
		if d == 0 {
			d = max(5*time.Second, *duration/3)
		}
		if !report(soak.RunClient(ctx, soak.ClientConfig{Duration: d, OutageReset: *resets})) {
			return 2
		}
	}
	if *hostile && ctx.Err() == nil {
		d := *hostileDuration
		if d == 0 {
			d = max(8*time.Second, *duration/2)
		}
		cfg := soak.HostileConfig{Duration: d}
		if !*quiet {
			cfg.Logf = func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
		}
		if !report(soak.RunHostile(ctx, cfg)) {
			return 2
		}
	}
	if failed {
		fmt.Fprintln(stdout, "FAIL")
		return 1
	}
	fmt.Fprintln(stdout, "PASS")
	return 0
}

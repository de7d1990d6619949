package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/shedkit/shedkit/sim/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Command shedsim is shedkit's simulator (sim/cli) with the peer policies
// that live outside the main module: "failsafe-adaptive", failsafe-go's
// adaptive limiter driven in virtual time (see package failsafesim).
//
//	cd bench && go run ./cmd/shedsim -suite \
//	    -policies 'static;shedkit-gradient;gcl-gradient2;failsafe-adaptive'
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/shedkit/shedkit/bench/failsafesim"
	"github.com/shedkit/shedkit/sim/cli"
)

func main() {
	failsafesim.Register()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

package soak_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/shedkit/shedkit/bench/soak"
)

// A 20-second server soak at the defaults (4,000 requests per second
// against an upstream that serves 400), printed with its checks.
func ExampleRun() {
	rep, err := soak.Run(context.Background(), soak.Config{Duration: 20 * time.Second})
	if err != nil {
		fmt.Println("run:", err)
	}
	_, _ = rep.WriteTo(os.Stdout)
	if err := rep.Check(); err != nil {
		fmt.Println(err)
	}
}

// The client soak: logical requests through the retrying transport while
// the upstream fails every attempt for 60% of the run.
func ExampleRunClient() {
	rep, err := soak.RunClient(context.Background(), soak.ClientConfig{Duration: 10 * time.Second})
	if err != nil {
		fmt.Println("run:", err)
	}
	fmt.Printf("%.2f attempts per logical request (bound %.2f)\n", rep.Amplification, rep.MaxAmplification)
	if err := rep.Check(); err != nil {
		fmt.Println(err)
	}
}

// The hostile soak: normal traffic while slow uploaders, clients that
// leave mid-request, encoded paths and an upstream with endless 503 bodies
// attack the service in the middle half of the run.
func ExampleRunHostile() {
	rep, err := soak.RunHostile(context.Background(), soak.HostileConfig{Duration: 10 * time.Second})
	if err != nil {
		fmt.Println("run:", err)
	}
	_, _ = rep.WriteTo(os.Stdout)
	if err := rep.Check(); err != nil {
		fmt.Println(err)
	}
}

// Invalid configurations are reported before anything starts, naming the
// field.
func ExampleRun_invalidConfig() {
	_, err := soak.Run(context.Background(), soak.Config{Duration: time.Second})
	fmt.Println(err)
	// Output: soak: invalid config: Duration: must be at least 6s, got 1s
}

package cli_test

import (
	"context"
	"os"
	"path/filepath"

	"github.com/shedkit/shedkit/sim/cli"
)

// Main is the whole shedsim command; a program that registers more
// policies with sim.RegisterPolicy calls it the same way.
func ExampleMain() {
	dir, err := os.MkdirTemp("", "shedsim")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "brownout.yaml")
	os.WriteFile(file, []byte(`name: brownout
duration: 40s
classes:
  - name: api
    rate: 600
upstream:
  capacity: 50
  service_time: {dist: lognormal, median: 40ms, sigma: 0.5}
  degradation: 0.5
  events:
    - {at: 15s, for: 10s, slowdown: 5}
`), 0o644)
	cli.Main(context.Background(), []string{"-scenario", file, "-policies", "none,static", "-quiet", "-out", ""}, os.Stdout, os.Stderr)
	// Output:
	// scenario  policy  goodput  trigger  recovery   p50    p99  adm p99  trig p99   amp  wasted  rejected  limit  classes (goodput/offered)
	// brownout  none      22.2%     6.6%     never  41ms  562ms   21.74s     8.99s  1.00   87.4%      0.0%      -
	// brownout  static    99.8%    99.9%        0s  45ms  432ms    432ms     629ms  1.00    0.1%     21.5%     50
}

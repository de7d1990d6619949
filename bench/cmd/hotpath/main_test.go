package main

import (
	"bytes"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/shedkit/shedkit/bench
cpu: AMD EPYC
BenchmarkHotPath/semaphore         	25435412	        10.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotPath/semaphore-2       	15827604	        20.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotPath/shed-gradient     	 4467430	        40.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotPath/shed-gradient-2   	 2590480	        80.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotPath/gcl-gradient2     	 1285686	       200.0 ns/op	     104 B/op	       3 allocs/op
BenchmarkHotPath/gcl-gradient2-2   	 1000000	       400.0 ns/op	     104 B/op	       3 allocs/op
BenchmarkHotPath/semaphore         	25435412	        12.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotPath/semaphore-2       	15827604	        21.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotPath/shed-gradient     	 4467430	        50.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotPath/shed-gradient-2   	 2590480	        90.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotPath/gcl-gradient2     	 1285686	       300.0 ns/op	     104 B/op	       3 allocs/op
BenchmarkHotPath/gcl-gradient2-2   	 1000000	       500.0 ns/op	     104 B/op	       3 allocs/op
BenchmarkHotPath/semaphore         	25435412	        11.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkRejected/semaphore        	48674313	         5.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkRejected/shed-gradient    	16536236	        15.0 ns/op	       0 B/op	       0 allocs/op
PASS
ok  	github.com/shedkit/shedkit/bench	8.923s
`

const want = `goos: linux
goarch: amd64
cpu: AMD EPYC

HotPath: medians of 3 run(s); each cell is GOMAXPROCS 1 / 2

| case | ns/op | range ns/op | B/op | allocs/op | x semaphore | x shed-gradient |
| --- | ---: | ---: | ---: | ---: | ---: | ---: |
| semaphore | 11.0 / 20.5 | 10.0-12.0 / 20.0-21.0 | 0 / 0 | 0 / 0 | 1.00 / 1.00 | 0.24 / 0.24 |
| shed-gradient | 45.0 / 85.0 | 40.0-50.0 / 80.0-90.0 | 0 / 0 | 0 / 0 | 4.09 / 4.15 | 1.00 / 1.00 |
| gcl-gradient2 | 250 / 450 | 200-300 / 400-500 | 104 / 104 | 3 / 3 | 22.73 / 21.95 | 5.56 / 5.29 |

Rejected: medians of 1 run(s); each cell is GOMAXPROCS 1 / 2

| case | ns/op | range ns/op | B/op | allocs/op | x semaphore | x shed-gradient |
| --- | ---: | ---: | ---: | ---: | ---: | ---: |
| semaphore | 5.00 / - | 5.00-5.00 / - | 0 / - | 0 / - | 1.00 / - | 0.33 / - |
| shed-gradient | 15.0 / - | 15.0-15.0 / - | 0 / - | 0 / - | 3.00 / - | 1.00 / - |
`

func TestSummary(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(nil, strings.NewReader(sample), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestNoResults(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(nil, strings.NewReader("PASS\nok x 0.1s\n"), &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "no benchmark results") {
		t.Errorf("stderr %q", errOut.String())
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got, ok := median(tc.xs); !ok || got != tc.want {
			t.Errorf("median(%v) = %v, %v; want %v", tc.xs, got, ok, tc.want)
		}
	}
	if _, ok := median(nil); ok {
		t.Error("median(nil) ok")
	}
}

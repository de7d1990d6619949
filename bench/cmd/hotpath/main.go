// Command hotpath summarizes `go test -bench` output of the peer
// benchmarks (bench/hotpath_test.go): for each benchmark family and case,
// the median ns/op, B/op and allocs/op over the runs (-count) at each
// GOMAXPROCS (-cpu), and the ratios of the medians to the reference
// (x/sync/semaphore) and to shed, all from the same run.
//
//	cd bench
//	go test -run '^$' -bench . -benchmem -cpu 1,2 -count 5 | tee bench.txt | go run ./cmd/hotpath
//	go run ./cmd/hotpath bench.txt
//
// A ratio above 1 means slower than the reference (or than shed).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hotpath", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ref := fs.String("ref", "semaphore", "case that ratios are taken against (the reference)")
	shed := fs.String("shed", "shed-gradient", "the shed case that the second ratio is taken against")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: go test -bench . -benchmem -cpu 1,2 -count 5 | hotpath [-ref CASE] [-shed CASE] [FILE...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var in []io.Reader
	for _, name := range fs.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(stderr, "hotpath:", err)
			return 1
		}
		defer f.Close()
		in = append(in, f)
	}
	if len(in) == 0 {
		in = append(in, stdin)
	}
	res := newResults()
	for _, r := range in {
		if err := res.parse(r); err != nil {
			fmt.Fprintln(stderr, "hotpath:", err)
			return 1
		}
	}
	if len(res.families) == 0 {
		fmt.Fprintln(stderr, "hotpath: no benchmark results in the input (run go test with -bench and -benchmem)")
		return 1
	}
	res.write(stdout, *ref, *shed)
	return 0
}

// key identifies one benchmark at one GOMAXPROCS.
type key struct {
	family, name string
	cpu          int
}

type samples struct{ ns, bytes, allocs []float64 }

type results struct {
	header   []string
	families []string            // in order of appearance
	cases    map[string][]string // family -> cases in order of appearance
	cpus     []int
	data     map[key]*samples
}

func newResults() *results {
	return &results{cases: map[string][]string{}, data: map[key]*samples{}}
}

var procSuffix = regexp.MustCompile(`-(\d+)$`)

// parse reads the standard benchmark format: a name, an iteration count,
// then value-unit pairs.
func (r *results) parse(in io.Reader) error {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		for _, h := range []string{"goos:", "goarch:", "cpu:"} {
			if strings.HasPrefix(line, h) && !slices.Contains(r.header, line) {
				r.header = append(r.header, line)
			}
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		cpu := 1
		if m := procSuffix.FindStringSubmatch(name); m != nil {
			cpu, _ = strconv.Atoi(m[1])
			name = name[:len(name)-len(m[0])]
		}
		family, cs, ok := strings.Cut(name, "/")
		if !ok {
			family, cs = name, name
		}
		k := key{family, cs, cpu}
		s := r.data[k]
		if s == nil {
			s = &samples{}
			r.data[k] = s
			if !slices.Contains(r.families, family) {
				r.families = append(r.families, family)
			}
			if !slices.Contains(r.cases[family], cs) {
				r.cases[family] = append(r.cases[family], cs)
			}
			if !slices.Contains(r.cpus, cpu) {
				r.cpus = append(r.cpus, cpu)
				slices.Sort(r.cpus)
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				s.ns = append(s.ns, v)
			case "B/op":
				s.bytes = append(s.bytes, v)
			case "allocs/op":
				s.allocs = append(s.allocs, v)
			}
		}
	}
	return sc.Err()
}

// median of xs, NaN-free; ok is false when xs is empty.
func median(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}

func (r *results) med(family, name string, cpu int, pick func(*samples) []float64) (float64, bool) {
	s := r.data[key{family, name, cpu}]
	if s == nil {
		return 0, false
	}
	return median(pick(s))
}

func pickNs(s *samples) []float64     { return s.ns }
func pickBytes(s *samples) []float64  { return s.bytes }
func pickAllocs(s *samples) []float64 { return s.allocs }

// perCPU joins one cell per GOMAXPROCS with " / ".
func (r *results) perCPU(cell func(cpu int) string) string {
	parts := make([]string, len(r.cpus))
	for i, c := range r.cpus {
		parts[i] = cell(c)
	}
	return strings.Join(parts, " / ")
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// count formats a per-op count: whole numbers as integers (a median of
// an even number of runs may fall between two).
func count(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func (r *results) write(w io.Writer, ref, shed string) {
	for _, h := range r.header {
		fmt.Fprintln(w, h)
	}
	cpus := make([]string, len(r.cpus))
	for i, c := range r.cpus {
		cpus[i] = strconv.Itoa(c)
	}
	for _, fam := range r.families {
		runs := 0
		for _, cs := range r.cases[fam] {
			for _, c := range r.cpus {
				if s := r.data[key{fam, cs, c}]; s != nil {
					runs = max(runs, len(s.ns))
				}
			}
		}
		fmt.Fprintf(w, "\n%s: medians of %d run(s); each cell is GOMAXPROCS %s\n\n", fam, runs, strings.Join(cpus, " / "))
		fmt.Fprintf(w, "| case | ns/op | range ns/op | B/op | allocs/op | x %s | x %s |\n", ref, shed)
		fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
		for _, cs := range r.cases[fam] {
			cell := func(pick func(*samples) []float64, format func(float64) string) string {
				return r.perCPU(func(c int) string {
					v, ok := r.med(fam, cs, c, pick)
					if !ok {
						return "-"
					}
					return format(v)
				})
			}
			rng := r.perCPU(func(c int) string {
				s := r.data[key{fam, cs, c}]
				if s == nil || len(s.ns) == 0 {
					return "-"
				}
				return num(slices.Min(s.ns)) + "-" + num(slices.Max(s.ns))
			})
			ratio := func(base string) string {
				return r.perCPU(func(c int) string {
					v, ok1 := r.med(fam, cs, c, pickNs)
					b, ok2 := r.med(fam, base, c, pickNs)
					if !ok1 || !ok2 || b == 0 {
						return "-"
					}
					return strconv.FormatFloat(v/b, 'f', 2, 64)
				})
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", cs, cell(pickNs, num), rng, cell(pickBytes, count), cell(pickAllocs, count), ratio(ref), ratio(shed))
		}
	}
}

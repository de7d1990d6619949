package chart

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shedkit/shedkit/sim"
)

func results(t *testing.T) []*sim.Result {
	t.Helper()
	sc, err := sim.Builtin("slowdown")
	if err != nil {
		t.Fatal(err)
	}
	sc.Duration, sc.Upstream.Events = 30*time.Second, []sim.UpstreamEvent{{At: 12 * time.Second, For: 8 * time.Second, Slowdown: 10}}
	sc.Trigger, sc.Expect = nil, nil
	sc.Classes[0].Rate = 600
	var rs []*sim.Result
	for _, n := range []string{"none", "static", "shedkit-gradient"} {
		p, err := sim.ParsePolicy(n)
		if err != nil {
			t.Fatal(err)
		}
		r, err := sim.Run(sc, p, sim.Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs
}

func TestChartsDeterministic(t *testing.T) {
	rs := results(t)
	for _, f := range []struct {
		name  string
		write func(*bytes.Buffer) error
		magic string
	}{
		{"svg", func(b *bytes.Buffer) error { return WriteSVG(b, rs) }, "<?xml"},
		{"png", func(b *bytes.Buffer) error { return WritePNG(b, rs) }, "\x89PNG\r\n\x1a\n"},
	} {
		var a, b bytes.Buffer
		if err := f.write(&a); err != nil {
			t.Fatal(err)
		}
		if err := f.write(&b); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(a.Bytes(), []byte(f.magic)) {
			t.Errorf("%s does not start with %q", f.name, f.magic)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("%s: two renderings differ", f.name)
		}
		if a.Len() < 10000 {
			t.Errorf("%s: only %d bytes", f.name, a.Len())
		}
	}
	var svg bytes.Buffer
	if err := WriteSVG(&svg, rs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shedkit-gradient", "static", "none", "goodput", "limit"} {
		if !bytes.Contains(svg.Bytes(), []byte(want)) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestNoResults(t *testing.T) {
	if err := WriteSVG(new(bytes.Buffer), nil); !errors.Is(err, ErrNoResults) {
		t.Errorf("err = %v", err)
	}
}

// Draw the runs of one scenario, one line per policy.
func ExampleWriteSVG() {
	sc, _ := sim.Builtin("spike")
	sc.Duration = 30 * time.Second
	sc.Trigger = &sim.Span{At: 12 * time.Second, For: 8 * time.Second}
	sc.Classes[0].Schedule = []sim.RateChange{{At: 12 * time.Second, Factor: 3, For: 8 * time.Second}}
	sc.Classes[0].Rate = 300
	var rs []*sim.Result
	for _, name := range []string{"none", "shedkit-gradient"} {
		p, _ := sim.ParsePolicy(name)
		r, err := sim.Run(sc, p, sim.Options{Seed: 1})
		if err != nil {
			panic(err)
		}
		rs = append(rs, r)
	}
	var svg bytes.Buffer
	if err := WriteSVG(&svg, rs); err != nil {
		panic(err)
	}
	fmt.Println(bytes.HasPrefix(svg.Bytes(), []byte("<?xml")))
	// Output: true
}

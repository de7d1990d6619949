package main

import (
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
)

// The default flags must build exactly the configuration make demo ran
// before the flags existed: Gradient with its defaults, interactive
// protected 0.8 with a queue of 200 waiting up to 250 ms, batch
// unprotected without a queue, Finagle's retry budget.
func TestDefaultAdmissionIsHandPicked(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []shed.ClassConfig{
		{Name: "interactive", Protected: 0.8, QueueDepth: 200, MaxWait: 250 * time.Millisecond},
		{Name: "batch"},
	}
	if got := o.adm.shedClasses(); !reflect.DeepEqual(got, want) {
		t.Errorf("classes %+v, want %+v", got, want)
	}
	if o.adm.algo != "gradient" || o.adm.tolerance != 0 || o.adm.backoff != 0 || o.adm.budgetRatio != 0.2 || o.adm.budgetFloor != 10 {
		t.Errorf("admission %+v", o.adm)
	}
	lim, err := o.adm.newLimit(o.initialLimit, o.latencyCeiling)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := limits.NewGradient(limits.GradientConfig{InitialLimit: 20})
	if _, ok := lim.(*limits.Gradient); !ok || lim.Limit() != ref.Limit() {
		t.Errorf("limit %T %d, want *limits.Gradient %d", lim, lim.Limit(), ref.Limit())
	}
}

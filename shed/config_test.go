package shed_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

func TestNewRejectsInvalidConfig(t *testing.T) {
	q := func(depth int, wait time.Duration) shed.ClassConfig {
		return shed.ClassConfig{Name: "c", QueueDepth: depth, MaxWait: wait}
	}
	many := make([]shed.ClassConfig, shed.MaxClasses+1)
	for i := range many {
		many[i].Name = string(rune('a' + i))
	}
	cases := []struct {
		name  string
		cfg   shed.Config
		field string
	}{
		{"no limit", shed.Config{}, "Limit"},
		{"negative limit", shed.Config{Limit: -1}, "Limit"},
		{"limit too large", shed.Config{Limit: shed.MaxLimit + 1}, "Limit"},
		{"limit and source", shed.Config{Limit: 3, Source: newFakeSource(3)}, "Limit"},
		{"source at zero", shed.Config{Source: newFakeSource(0)}, "Source"},
		{"source below zero", shed.Config{Source: newFakeSource(-4)}, "Source"},
		{"source that panics", shed.Config{Source: (*fakeSource)(nil)}, "Source"},
		{"negative cost budget", shed.Config{Limit: 1, MaxCost: -5}, "MaxCost"},
		{"cost budget over MaxTotalCost", shed.Config{Limit: 1, MaxCost: shed.MaxTotalCost + 1}, "MaxCost"},
		{"empty class name", shed.Config{Limit: 1, Classes: []shed.ClassConfig{{}}}, "Classes[0].Name"},
		{"class name with a line break", shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "a\nb"}}}, "Classes[0].Name"},
		{"class name with a bidi override", shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "a\u202eb"}}}, "Classes[0].Name"},
		{"class name not UTF-8", shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "a\xffb"}}}, "Classes[0].Name"},
		{"duplicate class", shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "a"}, {Name: "a"}}}, "Classes[1].Name"},
		{"share above 1", shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "a", Protected: 1.5}}}, "Classes[0].Protected"},
		{"negative share", shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "a", Protected: -0.1}}}, "Classes[0].Protected"},
		{"NaN share", shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "a", Protected: math.NaN()}}}, "Classes[0].Protected"},
		{"shares over 100%", shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "a", Protected: 0.7}, {Name: "b", Protected: 0.4}}}, "protected shares sum"},
		{"queue without max wait", shed.Config{Limit: 1, Classes: []shed.ClassConfig{q(5, 0)}}, "Classes[0].MaxWait"},
		{"max wait without queue", shed.Config{Limit: 1, Classes: []shed.ClassConfig{q(0, time.Second)}}, "Classes[0].QueueDepth"},
		{"negative queue depth", shed.Config{Limit: 1, Classes: []shed.ClassConfig{q(-1, time.Second)}}, "Classes[0].QueueDepth"},
		{"negative max wait", shed.Config{Limit: 1, Classes: []shed.ClassConfig{q(1, -time.Second)}}, "Classes[0].MaxWait"},
		{"too many classes", shed.Config{Limit: 1, Classes: many}, "Classes"},
		{"negative total queue", shed.Config{Limit: 1, MaxQueue: -1}, "MaxQueue"},
		{"negative demand hold", shed.Config{Limit: 1, DemandHold: -time.Second}, "DemandHold"},
		{"negative retry-after", shed.Config{Limit: 1, RetryAfterMin: -time.Second}, "RetryAfterMin"},
		{"retry-after max below min", shed.Config{Limit: 1, RetryAfterMin: 5 * time.Second, RetryAfterMax: time.Second}, "RetryAfterMax"},
		{"retry-after max over the cap", shed.Config{Limit: 1, RetryAfterMax: shed.MaxRetryAfter + 1}, "RetryAfterMax"},
		{"retry-after max of no cap", shed.Config{Limit: 1, RetryAfterMax: math.MaxInt64}, "RetryAfterMax"},
		{"retry-after min over the cap", shed.Config{Limit: 1, RetryAfterMin: 2 * shed.MaxRetryAfter}, "RetryAfterMin"},
		{"NaN sample rate", shed.Config{Limit: 1, MaxSamplesPerSecond: math.NaN()}, "MaxSamplesPerSecond"},
		{"NaN deadline margin", shed.Config{Limit: 1, DeadlineMargin: math.NaN()}, "DeadlineMargin"},
		{"huge deadline margin", shed.Config{Limit: 1, DeadlineMargin: shed.MaxDeadlineMargin + 1}, "DeadlineMargin"},
		{"infinite deadline margin", shed.Config{Limit: 1, DeadlineMargin: math.Inf(1)}, "DeadlineMargin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := shed.New(tc.cfg)
			if err == nil {
				t.Fatalf("New accepted %+v", tc.cfg)
			}
			if l != nil {
				t.Errorf("New returned a limiter with error %v", err)
			}
			if !errors.Is(err, shed.ErrInvalidConfig) {
				t.Errorf("error %v does not wrap ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %q", err, tc.field)
			}
		})
	}
}

func TestNewAcceptsDefaults(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 7})
	snap := l.Snapshot()
	if snap.Limit != 7 || len(snap.Classes) != 1 || snap.Classes[0].Name != "default" {
		t.Fatalf("snapshot of a default limiter = %+v", snap)
	}
	if c, ok := l.ClassByName("default"); !ok || c != 0 {
		t.Errorf(`ClassByName("default") = %v, %v`, c, ok)
	}
	if _, ok := l.ClassByName("nope"); ok {
		t.Error(`ClassByName("nope") found a class`)
	}
}

func TestInvalidRequests(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 2, Classes: []shed.ClassConfig{{Name: "a"}, {Name: "b"}}})
	for _, req := range []shed.Request{{Class: 2}, {Class: 255}, {Cost: -1}} {
		if _, err := l.TryAcquireAt(t0, req); !errors.Is(err, shed.ErrInvalidRequest) || errors.Is(err, shed.ErrRejected) {
			t.Errorf("TryAcquireAt(%+v) = %v, want ErrInvalidRequest", req, err)
		}
	}
	if _, _, err := l.EnqueueAt(t0, shed.Request{}, nil); !errors.Is(err, shed.ErrInvalidRequest) {
		t.Errorf("EnqueueAt with nil waiter = %v, want ErrInvalidRequest", err)
	}
	if n := l.InFlight(); n != 0 {
		t.Errorf("invalid requests left %d in flight", n)
	}
}

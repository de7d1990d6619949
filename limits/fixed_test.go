package limits

import (
	"errors"
	"testing"

	"github.com/shedkit/shedkit/shed"
)

func TestFixed(t *testing.T) {
	f, err := NewFixed(10)
	if err != nil {
		t.Fatal(err)
	}
	f.Observe(shed.Sample{Now: t0, Dropped: true, InFlight: 10})
	if f.Limit() != 10 {
		t.Fatalf("limit %d", f.Limit())
	}
	if err := f.Set(3); err != nil || f.Limit() != 3 {
		t.Fatalf("Set(3): %v, limit %d", err, f.Limit())
	}
	if err := f.Set(0); !errors.Is(err, ErrInvalidConfig) || f.Limit() != 3 {
		t.Fatalf("Set(0): %v, limit %d", err, f.Limit())
	}
	if _, err := NewFixed(-1); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewFixed(-1): %v", err)
	}
}

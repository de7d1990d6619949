package shed

import (
	"math/rand/v2"
	"testing"
)

// TestTicketTable checks the table against a map under random puts (of
// sequential tickets, as entries hand them out, wrapping at the tag bits)
// and removals, with lookups of live and gone tickets.
func TestTicketTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 1))
	var tt ticketTable
	want := map[uint64]int64{}
	next := uint64(guardTagMask - 500) // wraps within the run
	var live []uint64
	for op := range 200_000 {
		if len(live) == 0 || rng.IntN(100) < 52-len(live)/40 {
			k := next & guardTagMask
			next++
			tt.put(k, int64(op))
			want[k] = int64(op)
			live = append(live, k)
		} else {
			j := rng.IntN(len(live))
			k := live[j]
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			i := tt.find(k)
			if i < 0 || tt.slots[i].cost != want[k] {
				t.Fatalf("op %d: ticket %d at %d, want cost %d", op, k, i, want[k])
			}
			tt.remove(i)
			delete(want, k)
			if tt.find(k) >= 0 {
				t.Fatalf("op %d: ticket %d found after removal", op, k)
			}
		}
		if tt.n != len(want) {
			t.Fatalf("op %d: %d tickets, want %d", op, tt.n, len(want))
		}
		if op%1000 == 0 {
			for k, c := range want {
				if i := tt.find(k); i < 0 || tt.slots[i].cost != c {
					t.Fatalf("op %d: ticket %d lost", op, k)
				}
			}
		}
	}
	tt.reset()
	if tt.n != 0 || tt.find((next-1)&guardTagMask) >= 0 {
		t.Fatal("reset left tickets")
	}
}

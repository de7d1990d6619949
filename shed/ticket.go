package shed

// ticketTable is the set of a tenant's admissions in flight, by ticket,
// with their costs: an open-addressing table with linear probing. Tickets
// are handed out in sequence, so the admissions in flight mostly sit in
// consecutive slots and a lookup is one or two probes; unlike a map, it
// needs no allocation once it has grown to the tenant's largest work in
// flight, and a delete leaves no tombstone (backward-shift deletion).
type ticketTable struct {
	slots []ticketSlot // a power of two long, or nil
	n     int
}

type ticketSlot struct {
	key  uint64 // ticket + 1; 0: empty
	cost int64
}

// maxIdleTicketSlots bounds the table an idle entry keeps for reuse.
const maxIdleTicketSlots = 64

func (t *ticketTable) put(ticket uint64, cost int64) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	m := uint64(len(t.slots) - 1)
	for i := ticket & m; ; i = (i + 1) & m {
		if t.slots[i].key == 0 {
			t.slots[i] = ticketSlot{ticket + 1, cost}
			t.n++
			return
		}
	}
}

// find returns the slot of ticket, or -1.
func (t *ticketTable) find(ticket uint64) int {
	if t.n == 0 {
		return -1
	}
	m := uint64(len(t.slots) - 1)
	for i := ticket & m; ; i = (i + 1) & m {
		switch t.slots[i].key {
		case 0:
			return -1
		case ticket + 1:
			return int(i)
		}
	}
}

// remove empties slot i, moving back the entries after it that would no
// longer be found past the hole.
func (t *ticketTable) remove(i int) {
	m := len(t.slots) - 1
	t.slots[i] = ticketSlot{}
	t.n--
	for j := (i + 1) & m; t.slots[j].key != 0; j = (j + 1) & m {
		home := int(t.slots[j].key-1) & m
		if (j-home)&m >= (j-i)&m {
			t.slots[i], t.slots[j] = t.slots[j], ticketSlot{}
			i = j
		}
	}
}

func (t *ticketTable) grow() {
	old := t.slots
	t.slots = make([]ticketSlot, max(8, 2*len(old)))
	t.n = 0
	for _, s := range old {
		if s.key != 0 {
			t.put(s.key-1, s.cost)
		}
	}
}

// reset empties the table of an idle entry, keeping a small one for reuse.
func (t *ticketTable) reset() {
	if len(t.slots) > maxIdleTicketSlots {
		t.slots = nil
	}
	clear(t.slots)
	t.n = 0
}

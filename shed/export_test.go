package shed

// GuardsHeld returns how many guard slots are held, for tests: a slot is
// held exactly while its permit is in flight, so with nothing in flight
// none may be.
func GuardsHeld(l *Limiter) int {
	n := 0
	for i := range l.guards {
		if l.guards[i].Load() != 0 {
			n++
		}
	}
	return n
}

// GuardSlots returns the size of l's guard table.
func GuardSlots(l *Limiter) int { return len(l.guards) }

package limits

// Reason says what a window did to an adaptive limit, and why. Each
// closed window has exactly one.
type Reason uint8

const (
	// ReasonNone: no window has closed yet.
	ReasonNone Reason = iota
	// ReasonIdle: too few timed successes and no drops: nothing learned,
	// the limit holds.
	ReasonIdle
	// ReasonUnused: no congestion, but the work in flight stayed below
	// MinUtilization x limit: nothing learned about capacity, the limit
	// holds; after BaselineWindows such windows in a row it falls to what
	// their largest work in flight uses to MinUtilization.
	ReasonUnused
	// ReasonQueue: the latency is above the baseline, by less than
	// congestion: a queue may be forming, so the limit holds (and
	// Gradient's slow start ends).
	ReasonQueue
	// ReasonSlowStart: no congestion yet: the limit multiplies by Growth.
	ReasonSlowStart
	// ReasonGrow: no congestion and the limit in use: it grows by the
	// queue allowance (Gradient) or Increase (AIMD).
	ReasonGrow
	// ReasonRegrow: the limit binds while the latency is at or below the
	// baseline (no queue at all), or AIMD returns to where its last run of
	// cuts began: it grows multiplicatively.
	ReasonRegrow
	// ReasonCutLatency: the latency is clearly above the baseline: the
	// limit shrinks in proportion to the excess.
	ReasonCutLatency
	// ReasonCutQueue: the latency is back within the threshold but still
	// above the baseline, and the episode's cuts cost no throughput: the
	// rest is queue too, and the limit goes on shrinking.
	ReasonCutQueue
	// ReasonCutDrops: clearly more work was dropped than the background
	// explains: the limit shrinks in proportion to the excess share, by
	// Backoff at least and, beyond it, by half at most.
	ReasonCutDrops
	// ReasonCutCeiling: the latency is above LatencyCeiling: the limit
	// shrinks by Backoff.
	ReasonCutCeiling
	// ReasonHold: congestion that admitting less did not reduce: the
	// limit holds while the episode shows whether it is the dependency's
	// new normal.
	ReasonHold
	// ReasonRelearn: the held congestion is the dependency's new normal:
	// its latency (and drop rate) become the baseline (and background)
	// and the limit returns to the knee of the episode.
	ReasonRelearn
	// ReasonDrain: drops beyond the background while the work in flight
	// is still above a limit that was cut: nothing new was admitted, the
	// drops are of work admitted under the earlier limit, and the limit
	// holds until the work in flight is within it.
	ReasonDrain
	// ReasonCreep: no congestion, within a queue allowance of the limit
	// at which drops last cut Gradient: the limit grows by one unit per
	// window, as the knee lies just below that limit and the latency of
	// the successes does not show it.
	ReasonCreep
	// ReasonCutCrowd: the work admitted with the limit nearly full (its
	// top quarter) succeeded less than half as often as the rest: it
	// waited behind that work past its deadline, so those slots add work
	// that fails. The limit shrinks as for drops, though the drop rate
	// may be the usual one.
	ReasonCutCrowd
	// ReasonClose: at the floor, a window in which every unit of work was
	// dropped: the limit closes, and shed admits one probe per
	// Window.MinDuration until one succeeds (see shed.Prober).
	ReasonClose
	// ReasonReopen: a success while the limit was closed: the limit
	// reopens at its floor. Counted in Decisions, though no window
	// closed.
	ReasonReopen
	// NumReasons is the number of reasons; Reason values are below it.
	NumReasons
)

var reasonNames = [NumReasons]string{"none", "idle", "unused", "queue", "slow-start", "grow", "regrow", "cut-latency", "cut-queue", "cut-drops", "cut-ceiling", "hold", "relearn", "drain", "creep", "cut-crowd", "close", "reopen"}

// String returns the reason's name, as used in metrics and the simulator.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// IsCut reports whether the reason lowers the limit.
func (r Reason) IsCut() bool {
	return r >= ReasonCutLatency && r <= ReasonCutCeiling || r == ReasonCutCrowd || r == ReasonClose
}

// decisions counts windows by the reason of their decision.
type decisions [NumReasons]uint64

// each calls f with every reason's name and count, in Reason order.
func (d *decisions) each(f func(reason string, windows uint64)) {
	for r := Reason(1); r < NumReasons; r++ {
		f(r.String(), d[r])
	}
}

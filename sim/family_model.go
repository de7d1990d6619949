package sim

import (
	"fmt"
	"strings"
)

// DeadlineModel says what a replica and its upstream do when a request's
// deadline passes while the replica's call is out. The families draw
// their instances under the default; a run of a family applies another
// to every instance after drawing it, so that the same instances are
// compared under each (the draws do not depend on it). The models change
// the figures completely: a permit released at the deadline no longer
// bounds the upstream's work unless the upstream stops it too.
type DeadlineModel uint8

const (
	// DeadlineWait: the replica waits for its call however late (a
	// handler whose call ignores the request's context), as the
	// scenarios do by default.
	DeadlineWait DeadlineModel = iota
	// DeadlineCancel: the replica stops waiting at the deadline
	// (Service.CancelAtDeadline), while the upstream finishes the work.
	DeadlineCancel
	// DeadlineAbandon: the replica stops waiting at the deadline and the
	// upstream stops the work (Service.CancelAtDeadline and
	// Upstream.Abandon).
	DeadlineAbandon
)

var deadlineModelNames = [...]string{"wait", "cancel", "abandon"}

// DeadlineModelNames returns the names ParseDeadlineModel accepts.
func DeadlineModelNames() []string { return deadlineModelNames[:] }

func (m DeadlineModel) String() string {
	if int(m) < len(deadlineModelNames) {
		return deadlineModelNames[m]
	}
	return fmt.Sprintf("DeadlineModel(%d)", m)
}

// ParseDeadlineModel returns the model of the given name ("" for the
// default, wait).
func ParseDeadlineModel(s string) (DeadlineModel, error) {
	if s == "" {
		return DeadlineWait, nil
	}
	for i, n := range deadlineModelNames {
		if n == s {
			return DeadlineModel(i), nil
		}
	}
	return 0, fmt.Errorf("no deadline model %q (known: %s)", s, strings.Join(deadlineModelNames[:], ", "))
}

// Apply sets sc's replicas and upstream to model m. Wait leaves sc as
// it is, so that a scenario that sets the fields itself keeps them.
func (m DeadlineModel) Apply(sc *Scenario) {
	switch m {
	case DeadlineCancel:
		sc.Service.CancelAtDeadline = true
	case DeadlineAbandon:
		sc.Service.CancelAtDeadline = true
		sc.Upstream.Abandon = true
	}
}

// validate reports an unknown model.
func (m DeadlineModel) validate() error {
	if int(m) >= len(deadlineModelNames) {
		return fmt.Errorf("unknown deadline model %d", m)
	}
	return nil
}

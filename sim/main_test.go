package sim

import (
	"testing"

	"go.uber.org/goleak"
)

// RunBatch starts worker goroutines: none may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

package record_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The writer goroutine must end with Stop: none may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

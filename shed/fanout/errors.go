package fanout

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrTooManyItems matches every *TooManyItemsError with errors.Is.
var ErrTooManyItems = errors.New("fanout: too many items")

// TooManyItemsError is returned by Run when the input has more than
// Config.MaxItems items. When the length is known in advance (RunSlice,
// Config.Len) it is detected before anything runs; otherwise when item
// MaxItems+1 is pulled, before its task is created: tasks already started
// are then cancelled and awaited, and results delivered before it stay
// delivered.
type TooManyItemsError struct {
	// Max is Config.MaxItems.
	Max int
	// Len is the input's length when it was known in advance, else 0.
	Len int
}

func (e *TooManyItemsError) Error() string {
	if e.Len > 0 {
		return "fanout: too many items: " + strconv.Itoa(e.Len) + ", more than " + strconv.Itoa(e.Max)
	}
	return "fanout: too many items: more than " + strconv.Itoa(e.Max)
}

// Is reports whether target is ErrTooManyItems.
func (e *TooManyItemsError) Is(target error) bool { return target == ErrTooManyItems }

// ItemError is returned by Run in fail-fast mode: the item at Index failed
// with Err. It unwraps to Err.
type ItemError struct {
	Index int
	Err   error
}

func (e *ItemError) Error() string {
	return "fanout: item " + strconv.Itoa(e.Index) + ": " + e.Err.Error()
}

func (e *ItemError) Unwrap() error { return e.Err }

// ErrGoexit is the Value of the *PanicError reported for a task that
// called runtime.Goexit (for example t.FailNow in a test) instead of
// returning.
var ErrGoexit = errors.New("fanout: task called runtime.Goexit")

// PanicError is the error of an item whose task panicked. The panic is
// recovered in the task's goroutine, so it never crashes the caller. When
// Value is an error, PanicError unwraps to it.
type PanicError struct {
	// Value is what the task panicked with.
	Value any
	// Stack is the task goroutine's stack at the panic.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("fanout: task panicked: %v", e.Value)
}

// Unwrap returns Value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

func isPanic(err error) bool {
	var p *PanicError
	return errors.As(err, &p)
}

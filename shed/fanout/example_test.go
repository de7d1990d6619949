package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/fanout"
)

// fetch stands for a call to an upstream.
func fetch(ctx context.Context, id string) (string, error) {
	return strings.ToUpper(id), ctx.Err()
}

// Results arrive in completion order, each with its input's index.
func ExampleRun() {
	ids := []string{"a", "b", "c", "d", "e"}
	got := make([]string, len(ids))
	err := fanout.Run(context.Background(), slices.Values(ids), fetch,
		fanout.Config[string]{Bound: 2},
		func(r fanout.Result[string]) error {
			if r.Err != nil {
				return r.Err // or record it and go on
			}
			got[r.Index] = r.Value
			return nil
		})
	fmt.Println(got, err)
	// Output: [A B C D E] <nil>
}

// Ordered mode delivers in input order; results that finish early wait in
// a bounded reorder buffer.
func ExampleRun_ordered() {
	ids := []string{"a", "b", "c", "d", "e"}
	err := fanout.Run(context.Background(), slices.Values(ids), fetch,
		fanout.Config[string]{Bound: 3, Ordered: true},
		func(r fanout.Result[string]) error {
			fmt.Println(r.Index, r.Value)
			return nil
		})
	fmt.Println(err)
	// Output:
	// 0 A
	// 1 B
	// 2 C
	// 3 D
	// 4 E
	// <nil>
}

// Every fan-out of the service shares one limiter: each request runs at
// most 8 of its own tasks, and all requests together at most 50 upstream
// calls. A task waits up to 100 ms for its permit; a rejection is that
// item's error.
func ExampleRun_limiter() {
	upstream, err := shed.New(shed.Config{
		Limit:   50,
		Classes: []shed.ClassConfig{{Name: "upstream", QueueDepth: 500, MaxWait: time.Second}},
	})
	if err != nil {
		panic(err)
	}
	cfg := fanout.Config[string]{
		Bound:      8,
		Limiter:    upstream,
		PermitWait: 100 * time.Millisecond,
		FailFast:   true,
	}
	n := 0
	err = fanout.Run(context.Background(), slices.Values([]string{"x", "y", "z"}), fetch, cfg,
		func(r fanout.Result[string]) error { n++; return nil })
	fmt.Println(n, err, errors.Is(err, shed.ErrRejected))
	// Output: 3 <nil> false
}

// MaxItems refuses an oversized list while pulling it, before per-item
// work is built for the items past the maximum.
func ExampleRun_maxItems() {
	ids := strings.Split("a b c d e f g h", " ")
	err := fanout.Run(context.Background(), slices.Values(ids), fetch,
		fanout.Config[string]{Bound: 4, MaxItems: 5}, nil)
	fmt.Println(err, errors.Is(err, fanout.ErrTooManyItems))
	// Output: fanout: too many items: more than 5 true
}

// Each call to a model reserves its estimated tokens (the prompt's and
// the most the model may answer) against a budget shared by the service.
// Once the model has answered, the task reconciles the reservation with
// the tokens used: the budget it no longer needs admits waiting calls at
// once, while this task goes on. Run releases the permit when the task
// ends, with the cost last reconciled.
func ExampleReconcile() {
	tokens, err := shed.New(shed.Config{
		Limit:   16,
		MaxCost: 8_000,
		Classes: []shed.ClassConfig{{Name: "llm", QueueDepth: 64, MaxWait: 10 * time.Second}},
	})
	if err != nil {
		panic(err)
	}
	const maxAnswer = 1_000
	cfg := fanout.Config[string]{
		Bound:   4,
		Limiter: tokens,
		Ordered: true,
		Request: func(prompt string) shed.Request {
			return shed.Request{Cost: int64(len(prompt)) + maxAnswer}
		},
	}
	complete := func(ctx context.Context, prompt string) (int64, error) {
		used := int64(len(prompt)) + 20 // the model's reported usage
		if !fanout.Reconcile(ctx, used) {
			return 0, errors.New("no permit to reconcile")
		}
		// ... parse and store the answer, still holding the permit ...
		return used, nil
	}
	prompts := []string{"summarize the report", "translate the title", "tag the photo"}
	err = fanout.RunSlice(context.Background(), prompts, complete, cfg,
		func(r fanout.Result[int64]) error {
			fmt.Println(r.Index, r.Value, r.Err)
			return nil
		})
	fmt.Println(err, tokens.Snapshot().InFlightCost)
	// Output:
	// 0 40 <nil>
	// 1 39 <nil>
	// 2 33 <nil>
	// <nil> 0
}

//go:build race

package sim

// raceEnabled scales heavy tests down: under the race detector the
// simulator runs about 25 times slower (every atomic of the limiter is
// instrumented).
const raceEnabled = true

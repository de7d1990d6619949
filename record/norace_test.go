//go:build !race

package record_test

const raceEnabled = false

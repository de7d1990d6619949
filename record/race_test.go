//go:build race

package record_test

// raceEnabled: the race detector makes sync.Pool drop a share of what is
// put back, so that pooled code allocates under it.
const raceEnabled = true

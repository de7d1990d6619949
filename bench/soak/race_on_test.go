//go:build race

package soak

// raceEnabled scales the soaks down: under the race detector every request
// costs several times the CPU, and the load generator shares 2 cores with
// the server.
const raceEnabled = true

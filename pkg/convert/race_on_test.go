//go:build race

package convert

// raceEnabled trims the sparse-install test's widths, whose CPU generations
// the race detector slows by an order of magnitude (testfix.Quick).
const raceEnabled = true

//go:build race

package server_test

// raceEnabled shortens the corpus test, whose tiny-model generations the
// race detector slows by an order of magnitude.
const raceEnabled = true

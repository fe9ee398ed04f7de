//go:build race

package runtime

// raceEnabled shortens the long-prompt tests, which the race detector slows
// by an order of magnitude.
const raceEnabled = true

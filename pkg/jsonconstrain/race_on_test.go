//go:build race

package jsonconstrain

// raceEnabled shortens the corpus generation test, which the race detector
// slows by an order of magnitude.
const raceEnabled = true

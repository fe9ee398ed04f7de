//go:build race

package responses

// raceEnabled trims the forced-call test's seeds, whose tiny-model
// generations the race detector slows by an order of magnitude
// (testfix.Quick); scripts/test.sh runs all of them without it.
const raceEnabled = true

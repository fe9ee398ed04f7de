//go:build race

package expertcache

// raceEnabled trims the hit-rate simulations, single-goroutine work the
// race detector slows several times over (testfix.Quick); scripts/test.sh
// runs them whole without it.
const raceEnabled = true

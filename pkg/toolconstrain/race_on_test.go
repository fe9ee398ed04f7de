//go:build race

package toolconstrain

// raceEnabled trims the seeds of the sampled-call tests, which the race
// detector slows by an order of magnitude (testfix.Quick); scripts/test.sh
// runs all of them without it.
const raceEnabled = true

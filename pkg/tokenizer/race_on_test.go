//go:build race

package tokenizer

// raceEnabled trims the random EncodeLimit texts, single-goroutine work the
// race detector slows several times over (testfix.Quick); scripts/test.sh
// runs them all without it.
const raceEnabled = true

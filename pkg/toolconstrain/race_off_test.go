//go:build !race

package toolconstrain

const raceEnabled = false

//go:build !race

package jsonconstrain

const raceEnabled = false

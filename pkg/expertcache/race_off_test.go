//go:build !race

package expertcache

const raceEnabled = false

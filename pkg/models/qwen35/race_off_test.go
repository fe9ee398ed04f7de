//go:build !race

package qwen35

const raceEnabled = false

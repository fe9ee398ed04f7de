//go:build !race

package qwen38

const raceEnabled = false

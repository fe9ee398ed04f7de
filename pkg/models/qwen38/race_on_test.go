//go:build race

package qwen38

// raceEnabled: the race detector makes the pure-Go kernels about 30×
// slower, so the package runs its quick test set.
const raceEnabled = true

//go:build race

package qwen35

// raceEnabled: the race detector instruments every load of the pure-Go
// kernels (about 30× slower), so the package runs its quick test set.
const raceEnabled = true

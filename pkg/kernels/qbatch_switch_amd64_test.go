//go:build !purego

package kernels

import "testing"

// withEachQBatchKernel runs f with each batched kernel this CPU has made the
// active one (once, unchanged, when it has none), restoring the choice.
func withEachQBatchKernel(t *testing.T, f func(t *testing.T)) {
	if len(qBatchKernels) == 0 {
		f(t)
		return
	}
	saved := qBatchActive
	defer func() { qBatchActive = saved }()
	for _, k := range qBatchKernels {
		qBatchActive = k
		t.Run(k.name, f)
	}
}

func qBatchKernelNames() []string {
	var names []string
	for _, k := range qBatchKernels {
		names = append(names, k.name)
	}
	return names
}

// useQBatchKernel makes the named kernel the active one (none: unchanged) and
// returns what restores the choice.
func useQBatchKernel(name string) func() {
	saved := qBatchActive
	for _, k := range qBatchKernels {
		if k.name == name {
			qBatchActive = k
		}
	}
	return func() { qBatchActive = saved }
}

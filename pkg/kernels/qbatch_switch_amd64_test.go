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
	saved, savedMin := qBatchActive, qBatchFusedMinGroups
	defer func() { qBatchActive, qBatchFusedMinGroups = saved, savedMin }()
	qBatchFusedMinGroups = 0 // each kernel on every shape
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
	saved, savedMin := qBatchActive, qBatchFusedMinGroups
	for _, k := range qBatchKernels {
		if k.name == name {
			qBatchActive = k
			qBatchFusedMinGroups = 0
		}
	}
	return func() { qBatchActive, qBatchFusedMinGroups = saved, savedMin }
}

// qUnpackQ4Variants lists qUnpackQ4's kernels this CPU runs (its avx2
// argument).
func qUnpackQ4Variants() []bool {
	var v []bool
	if hasAVX512VNNI {
		v = append(v, false)
	}
	if hasAVX2 {
		v = append(v, true)
	}
	return v
}

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

// forEachQuantizer runs f with each activation quantizer this CPU has (and
// the Go one), restoring the choice.
func forEachQuantizer(t *testing.T, f func(t *testing.T)) {
	saved512, saved2 := useQuantizeAVX512, useQuantizeAVX2
	defer func() { useQuantizeAVX512, useQuantizeAVX2 = saved512, saved2 }()
	levels := []struct {
		name         string
		avx512, avx2 bool
	}{{"Go", false, false}, {"AVX2", false, hasAVX2}, {"AVX-512", hasAVX512, hasAVX2}}
	for _, l := range levels {
		if l.name == "AVX2" && !hasAVX2 || l.name == "AVX-512" && !hasAVX512 {
			continue
		}
		useQuantizeAVX512, useQuantizeAVX2 = l.avx512, l.avx2
		t.Run(l.name, f)
	}
}

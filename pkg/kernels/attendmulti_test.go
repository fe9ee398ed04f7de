package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestAttendMultiBitwise: the multi-set kernels give every set bitwise what
// the one-set kernels give it, Q8 and BF16, with and without the assembly,
// for sets of lengths around the tile of 64 in any order (a set shorter
// than the tiles others reach, sets of equal length), head counts in and out
// of fours and widths in and out of the assembly's steps.
func TestAttendMultiBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(83, 84))
	for _, level := range floatAsmLevels() {
		restore := level.set()
		for _, heads := range []int{1, 3, 8} {
			for _, d := range []int{16, 48, 256} {
				for _, ns := range [][]int{{1}, {63, 64, 65}, {130, 1, 64, 129}, {200, 200}, {5, 70, 3, 66, 140, 2, 64, 1}} {
					name := fmt.Sprintf("%s/heads=%d/d=%d/ns=%v", level.name, heads, d, ns)
					checkAttendMulti(t, rng, name, heads, d, ns)
				}
			}
		}
		restore()
	}
}

func checkAttendMulti(t *testing.T, rng *rand.Rand, name string, heads, d int, ns []int) {
	t.Helper()
	const kvHeads = 2
	stride, off, group := kvHeads*d, d, 16
	n := maxOf(ns)
	x := randomVector(rng, n*stride)
	q8 := q8Cache(x, stride, group)
	q8 = Q8Rows{Values: q8.Values[off:], Scales: q8.Scales[off/group:], Stride: stride, Group: group}
	b16 := make([]uint16, len(x))
	ToBF16(b16, x)
	bf := BF16Rows{Values: b16[off:], Stride: stride}
	sets := len(ns)
	qs, qis, scores, want := make([][]float32, sets), make([][]float32, sets), make([][]float32, sets), make([][]float32, sets)
	os, wantO, ws := make([][]float32, sets), make([][]float32, sets), make([][]float32, sets)
	for i, ni := range ns {
		qs[i] = randomVector(rng, heads*d)
		qis[i] = make([]float32, heads*d)
		scores[i], want[i] = make([]float32, heads*ni), make([]float32, heads*ni)
		ws[i] = randomVector(rng, heads*ni)
		os[i], wantO[i] = make([]float32, heads*d), make([]float32, heads*d)
	}
	scratch := make([]float32, AttendScratch(heads, d))
	for _, enc := range []string{"q8", "bf16"} {
		for i, ni := range ns {
			qi := make([]float32, heads*d)
			if enc == "q8" {
				AttendScoresQ8(want[i], qs[i], d, q8, ni, 0.125, qi, scratch)
				AttendValuesQ8(wantO[i], ws[i], d, q8, ni, scratch)
			} else {
				AttendScoresBF16(want[i], qs[i], d, bf, ni, 0.125, qi, scratch)
				AttendValuesBF16(wantO[i], ws[i], d, bf, ni, scratch)
			}
		}
		if enc == "q8" {
			AttendScoresQ8Multi(scores, qs, ns, d, q8, 0.125, qis, scratch)
			AttendValuesQ8Multi(os, ws, ns, d, q8, scratch)
		} else {
			AttendScoresBF16Multi(scores, qs, ns, d, bf, 0.125, qis, scratch)
			AttendValuesBF16Multi(os, ws, ns, d, bf, scratch)
		}
		for i := range ns {
			assertSameFloats(t, fmt.Sprintf("%s %s set %d scores", name, enc, i), scores[i], want[i])
			assertSameFloats(t, fmt.Sprintf("%s %s set %d values", name, enc, i), os[i], wantO[i])
		}
	}
}

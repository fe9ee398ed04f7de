package main

import "fmt"

// softmax: the maximum and the scaling of softmax's rows, AVX-512 only.
func softmax() {
	softmaxMax()
	softmaxScale()
}

// sixteens walks the CX floats at SI four registers at a time, then one,
// then a masked tail (K1, when any lanes are left), then falls through to
// label end. each(n) handles n registers at SI, tail the last lanes.
func sixteens(each func(n int), tail func()) {
	for _, n := range []int{4, 1} {
		label(fmt.Sprintf("by%d", 16*n))
		emit("CMPQ CX, $%d", 16*n)
		if n == 4 {
			emit("JLT  by16")
		} else {
			emit("JLT  tail")
		}
		each(n)
		emit("ADDQ $%d, SI", 64*n)
		emit("SUBQ $%d, CX", 16*n)
		emit("JMP  by%d", 16*n)
	}
	label("tail")
	tailMask("end")
	tail()
	label("end")
}

// at is register c's place in a run of registers at SI.
func at(c int) string {
	if c == 0 {
		return "(SI)"
	}
	return fmt.Sprintf("%d(SI)", 64*c)
}

func softmaxMax() {
	fn("maxAVX512", "(x *float32, n int) (m float32, nan bool)", 21, `
Four accumulators of 16 lanes from −Inf; the tail's missing lanes keep
−Inf (merge masking). K3 collects the lanes that held a NaN.`)
	emit("MOVQ x+0(FP), SI")
	emit("MOVQ n+8(FP), CX")
	emit("MOVL $0xff800000, AX // −Inf")
	emit("VPBROADCASTD AX, Z31")
	for c := range 4 {
		emit("VMOVAPS Z31, Z%d", c)
	}
	emit("KXORW K3, K3, K3")
	// fold takes the n registers in Z4 onwards into the maxima and the NaN
	// lanes into K3.
	fold := func(n int) {
		for c := range n {
			emit("VCMPPS $3, Z%d, Z%d, K%d", 4+c, 4+c, 4+c)
		}
		for c := range n {
			emit("KORW K%d, K3, K3", 4+c)
		}
		for c := range n {
			emit("VMAXPS Z%d, Z%d, Z%d", 4+c, c, c)
		}
	}
	sixteens(func(n int) {
		for c := range n {
			emit("VMOVUPS %s, Z%d", at(c), 4+c)
		}
		fold(n)
	}, func() {
		emit("VMOVAPS Z31, Z4")
		emit("VMOVUPS (SI), K1, Z4")
		fold(1)
	})
	emit("VMAXPS Z1, Z0, Z0")
	emit("VMAXPS Z3, Z2, Z2")
	emit("VMAXPS Z2, Z0, Z0")
	emit("VEXTRACTF64X4 $1, Z0, Y1")
	emit("VMAXPS Y1, Y0, Y0")
	emit("VEXTRACTF128 $1, Y0, X1")
	emit("VMAXPS X1, X0, X0")
	emit("VPERMILPS $0x4e, X0, X1")
	emit("VMAXPS X1, X0, X0")
	emit("VPERMILPS $0xb1, X0, X1")
	emit("VMAXPS X1, X0, X0")
	emit("MOVSS X0, m+16(FP)")
	emit("KMOVW K3, AX")
	emit("TESTL AX, AX")
	emit("SETNE nan+20(FP)")
	emit("VZEROUPPER")
	emit("RET")
}

func softmaxScale() {
	fn("scaleAVX512", "(x *float32, n int, s float32)", 20, `
x[i] *= s, 16 lanes at a time with a masked tail.`)
	emit("MOVQ x+0(FP), SI")
	emit("MOVQ n+8(FP), CX")
	emit("VBROADCASTSS s+16(FP), Z31")
	sixteens(func(n int) {
		for c := range n {
			emit("VMULPS %s, Z31, Z%d", at(c), 4+c)
		}
		for c := range n {
			emit("VMOVUPS Z%d, %s", 4+c, at(c))
		}
	}, func() {
		emit("VMOVUPS.Z (SI), K1, Z4")
		emit("VMULPS Z4, Z31, Z4")
		emit("VMOVUPS Z4, K1, (SI)")
	})
	emit("VZEROUPPER")
	emit("RET")
}

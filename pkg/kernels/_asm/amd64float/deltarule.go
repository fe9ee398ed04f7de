package main

import "fmt"

// deltaRule: deltaRuleGeneric per block of four registers of columns, then
// of one. Registers: 0–3 the sums p (pass 1) and o (pass 2), 4–7 the rows of
// S being worked on, 8–11 δ; the rest, and the products of pass 2, where the
// extension has room for them.
func deltaRule(a isa) {
	fn("deltaRule"+a.name, "(s *float32, rows, cols int, decay, beta float32, k, v, q, o *float32, next int)", 72, fmt.Sprintf(`
deltaRuleGeneric, per block of %d columns (then of %d): pass 1 over the rows stores
S·decay back to S and sums p += (S·decay)·k[i] in %s–%s; δ = (v − p)·β goes to
%s–%s; pass 2 over the rows (now in L1) stores S = (S·decay) + k[i]·δ, reading the
decayed S pass 1 left instead of multiplying again (the same rounded value: the
multiplies, not the loads, bound this loop), and sums o += S·q[i] in %s–%s.
Pass 1 also prefetches the memory next bytes after S at the same offset when next is
not 0: a decode step runs the value heads of a layer in order, and each head's state
follows the last; a prefill chunk runs one head over its tokens (next 0).`,
		4*a.lanes, a.lanes, a.v(0), a.v(3), a.v(8), a.v(11), a.v(0), a.v(3)))
	emit("MOVQ s+0(FP), SI")
	emit("MOVQ rows+8(FP), CX")
	emit("MOVQ cols+16(FP), R9")
	emit("VBROADCASTSS decay+24(FP), %s", a.v(drDecay(a)))
	emit("VBROADCASTSS beta+28(FP), %s", a.v(drBeta(a)))
	emit("MOVQ k+32(FP), R8")
	emit("MOVQ v+40(FP), DX")
	emit("MOVQ q+48(FP), BX")
	emit("MOVQ o+56(FP), DI")
	emit("SHLQ $2, R9              // row stride in bytes")
	emit("XORQ R10, R10            // byte offset of the column block")
	emit("MOVQ next+64(FP), R15    // bytes from S to what to prefetch (0: nothing)")
	out.WriteString("\n")
	label("block")
	emit("MOVQ R9, AX")
	emit("SUBQ R10, AX             // bytes of columns left")
	emit("JLE  done")
	emit("CMPQ AX, $%d", 4*a.bytes())
	emit("JLT  narrow")
	emit("JMP  wide")
	deltaRuleBlock(a, "wide", 4)
	deltaRuleBlock(a, "narrow", 1)
	out.WriteString("\n")
	label("done")
	emit("VZEROUPPER")
	emit("RET")
}

// The registers outside 0–11: AVX-512 keeps the products of pass 2 apart in
// 12–15; AVX2, out of registers, writes them over S's rows in 4–7.
func drDecay(a isa) int          { return a.pick(31, 15) }
func drBeta(a isa) int           { return a.pick(27, 12) }
func drK(a isa) int              { return a.pick(30, 13) }
func drQ(a isa) int              { return a.pick(29, 14) }
func drProduct(a isa, c int) int { return a.pick(12, 4) + c }

// deltaRuleBlock is one block of n registers of columns at byte offset R10.
func deltaRuleBlock(a isa, name string, n int) {
	sum := func(c int) string { return a.v(c) }
	s := func(c int) string { return a.v(4 + c) }
	delta := func(c int) string { return a.v(8 + c) }
	row := func(c int) string { return fmt.Sprintf("%d(R11)", c*a.bytes()) }
	k, q := a.v(drK(a)), a.v(drQ(a))

	// storeAndSum ends a row of either pass: S's new rows go back to memory,
	// their products with by (k[i] or q[i]) into the sums; then the next
	// row, and q[i+1] too in pass 2.
	storeAndSum := func(by, loop string) {
		for c := range n {
			emit("VMOVUPS %s, %s", s(c), row(c))
		}
		for c := range n {
			emit("VMULPS %s, %s, %s", by, s(c), s(c))
		}
		for c := range n {
			emit("VADDPS %s, %s, %s", s(c), sum(c), sum(c))
		}
		emit("ADDQ R9, R11")
		emit("ADDQ $4, R12")
		if by == q {
			emit("ADDQ $4, R14")
		}
		emit("DECQ R13")
		emit("JNZ  %s", loop)
	}

	// pass1 stores S·decay back and sums p += (S·decay)·k[i].
	pass1 := func(loop string, prefetch bool) {
		label(loop)
		if prefetch {
			for off := 0; off < n*a.bytes(); off += 64 {
				emit("PREFETCHT0 %d(R11)(R15*1)", off)
			}
		}
		emit("VBROADCASTSS (R12), %s", k)
		for c := range n {
			emit("VMULPS %s, %s, %s", row(c), a.v(drDecay(a)), s(c))
		}
		storeAndSum(k, loop)
	}

	out.WriteString("\n")
	label(name)
	a.zeroFirst(n)
	emit("LEAQ (SI)(R10*1), R11    // &S[0, block]")
	emit("MOVQ R8, R12             // &k[0]")
	emit("MOVQ CX, R13             // rows left")
	emit("TESTQ R15, R15")
	emit("JZ   %sPN", name)
	pass1(name+"P", true)
	emit("JMP  %sD", name)
	pass1(name+"PN", false)
	label(name + "D")
	emit("// δ = (v − p)·β; o starts at zero")
	for c := range n {
		emit("VMOVUPS %d(DX)(R10*1), %s", c*a.bytes(), delta(c))
		emit("VSUBPS %s, %s, %s", sum(c), delta(c), delta(c))
		emit("VMULPS %s, %s, %s", a.v(drBeta(a)), delta(c), delta(c))
		a.zero(c)
	}
	emit("LEAQ (SI)(R10*1), R11")
	emit("MOVQ R8, R12             // &k[0]")
	emit("MOVQ BX, R14             // &q[0]")
	emit("MOVQ CX, R13")
	label(name + "U")
	emit("VBROADCASTSS (R12), %s", k)
	emit("VBROADCASTSS (R14), %s", q)
	for c := range n {
		emit("VMULPS %s, %s, %s", delta(c), k, a.v(drProduct(a, c)))
	}
	for c := range n {
		emit("VADDPS %s, %s, %s", row(c), a.v(drProduct(a, c)), s(c))
	}
	storeAndSum(q, name+"U")
	for c := range n {
		emit("VMOVUPS %s, %d(DI)(R10*1)", sum(c), c*a.bytes())
	}
	emit("ADDQ $%d, R10", n*a.bytes())
	emit("JMP  block")
}

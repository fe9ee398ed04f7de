package main

import "fmt"

// qBatchAVX512Fused2 is qBatchAVX512Fused over two blocks of 16 tokens at
// once, 8 rows at a time: each broadcast row dword feeds the VPDPBUSD of both
// blocks. One VPDPBUSD per broadcast left the kernel bound by loads (about
// two a cycle on Zen 5, each VPDPBUSD's broadcast one of them); two per
// broadcast halve the dots' loads (160 against 272 per group), and each
// row's converted scale and bias is broadcast once for both blocks. The
// float combination of every (row, token) is qBatchAVX512Fused's, in the
// same order, so the results are bitwise its own (and qRowsGeneric's).
//
// A block of 16 rows runs as two halves of 8 rows (h), each over every
// group; half h reads lanes [8h, 8h+8) of the converted scales. The second
// token block's xqT lies groups KiB after the first's (8·AX with AX =
// groups·128), its dsT AX bytes after; idx has 32 entries (block 2's
// tokens at 16–31) and mask 32 bits.
//
// Registers: DI dst, BX blocks of 16 rows left, R8 the block's rows 0–3 (+
// 8h), R9 its rows 4–7, DX stride, R14 3·stride, R10 xqT at group g, SI dsT
// at group g, CX the converted scales at group g, R12 the biases' offset from
// them, R13 the accumulators of lane g mod 16 ((token block b, row r) at
// +1024·(8b+r)), R15 groups left, AX groups·128.
//
// Z0–Z15 the dots of (b, r) in Z(8b+r); Z16/Z17 and Z22/Z23 activations
// (then a row's scale and bias); Z18–Z21 broadcast weights (then
// temporaries); Z24–Z27 dx and Σx of the two blocks; Z28–Z30 temporaries;
// Z31 +0.
//
// work: results (2 × 512 bytes), then the accumulators at the next 1 KiB
// boundary (16 KiB).
func qBatchAVX512Fused2() {
	const name = "qBatchAVX512Fused2"
	batchText(name)
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ w+8(FP), R8")
	emit("MOVQ scales+24(FP), CX")
	rowBlocks(name, 4)
	emit("VPXORD Z31, Z31, Z31")
	label(name + "_block")
	for h := range 2 {
		fused2Half(name, h)
	}
	comment("next block: weights 16 rows on, converted scales gpad groups on")
	emit("MOVQ stride+16(FP), DX")
	emit("LEAQ (R8)(DX*8), R8")
	emit("LEAQ (R8)(DX*8), R8")
	emit("MOVQ groups+48(FP), R11")
	emit("ADDQ $15, R11")
	emit("ANDQ $-16, R11")
	emit("SHLQ $6, R11")
	emit("ADDQ R11, CX")
	emit("DECQ BX")
	emit("JNZ %s_block", name)
	label(name + "_done")
	emit("VZEROUPPER")
	emit("RET")
}

// fused2Half is half h (rows 8h..8h+7) of a 16-row block of
// qBatchAVX512Fused2: every group, the fold and the stores; it leaves CX
// and R8 as it found them, DI 8 rows on.
func fused2Half(name string, h int) {
	p := fmt.Sprintf("%s_h%d", name, h)
	emit("MOVQ stride+16(FP), DX")
	emit("LEAQ (DX)(DX*2), R14")
	if h == 0 {
		emit("MOVQ R8, R11")
	} else {
		emit("LEAQ (R8)(DX*8), R11")
	}
	emit("LEAQ (R11)(DX*4), R9")
	emit("MOVQ xqT+56(FP), R10")
	emit("MOVQ dsT+64(FP), SI")
	emit("MOVQ tail+96(FP), R12")
	emit("MOVQ groups+48(FP), AX")
	emit("SHLQ $7, AX")
	accBase("R13")

	group := func(first bool) { fused2Group(h, first) }
	firstGroups(p, "R15", "", group)
	restGroupsWrapping(p, group)

	foldRows(p, "per (block, row): fold its 16 accumulators into the results", func() { accBase("R13") })
	for b := range 2 {
		transposeStoreBlock(fmt.Sprintf("%s_b%d", p, b), 8, 512*b, 16*b)
	}
	emit("ADDQ $32, DI")
	comment("back to the block's converted scales at group 0")
	emit("MOVQ groups+48(FP), R15")
	emit("SHLQ $6, R15")
	emit("SUBQ R15, CX")
}

// fused2Group is one group of a half of qBatchAVX512Fused2: the dots of 8
// rows × 2 token blocks into Z0–Z15, then per (block, row) v = (s·dx)·float(d)
// + b·Σx added to its accumulator of this lane (first: to +0).
func fused2Group(h int, first bool) {
	for i := range 16 {
		emit("VPXORD Z%d, Z%d, Z%d", i, i, i)
	}
	rowAddr := func(r, k int) string {
		base := []string{"R11", "R9"}[r/4]
		off := []string{"", "(DX*1)", "(DX*2)", "(R14*1)"}[r%4]
		return fmt.Sprintf("%d(%s)%s", 4*k, base, off)
	}
	for k := range 16 {
		a1, a2 := 16+6*(k%2), 17+6*(k%2) // Z16/Z17 or Z22/Z23
		emit("VMOVDQU32 %d(R10), Z%d", 64*k, a1)
		emit("VMOVDQU32 %d(R10)(AX*8), Z%d", 64*k, a2)
		for r := range 8 {
			wr := 18 + r%4
			emit("VPBROADCASTD %s, Z%d", rowAddr(r, k), wr)
			emit("VPDPBUSD Z%d, Z%d, Z%d", a1, wr, r)
			emit("VPDPBUSD Z%d, Z%d, Z%d", a2, wr, 8+r)
		}
	}
	emit("VMOVUPS (SI), Z24")       // dx of block 1
	emit("VMOVUPS 64(SI), Z25")     // Σx of block 1
	emit("VMOVUPS (SI)(AX*1), Z26") // dx of block 2
	emit("VMOVUPS 64(SI)(AX*1), Z27")
	for r := range 8 {
		sr, br := 16+6*(r%2), 17+6*(r%2)
		emit("VBROADCASTSS %d(CX), Z%d", 4*(8*h+r), sr)
		emit("VBROADCASTSS %d(CX)(R12*1), Z%d", 4*(8*h+r), br)
		for b := range 2 {
			i := 8*b + r
			t, u := 18+i%4, 28+i%3
			emit("VCVTDQ2PS Z%d, Z%d", i, i)
			emit("VMULPS Z%d, Z%d, Z%d", 24+2*b, sr, t)
			emit("VMULPS Z%d, Z%d, Z%d", i, t, t)
			emit("VMULPS Z%d, Z%d, Z%d", 25+2*b, br, u)
			emit("VADDPS Z%d, Z%d, Z%d", u, t, t)
			if first {
				emit("VADDPS Z31, Z%d, Z%d", t, t)
			} else {
				emit("VADDPS %d(R13), Z%d, Z%d", 1024*i, t, t)
			}
			emit("VMOVUPS Z%d, %d(R13)", t, 1024*i)
		}
	}
	emit("ADDQ $64, R11")
	emit("ADDQ $64, R9")
	emit("ADDQ $1024, R10")
	emit("ADDQ $128, SI")
	emit("ADDQ $64, CX")
}

// transposeStoreBlock is transposeStore for the rb rows of results at
// work+res, the token block whose idx entries and mask bits start at
// first; DI stays.
func transposeStoreBlock(name string, rb, res, first int) {
	comment("transpose rows × tokens to tokens × rows, store each token's rows")
	emit("MOVQ work+88(FP), R14")
	for r := range 16 {
		if r < rb {
			emit("VMOVUPS %d(R14), Z%d", res+64*r, r)
		} else {
			emit("VPXORD Z%d, Z%d, Z%d", r, r, r)
		}
	}
	emit("MOVQ mask+80(FP), R9")
	emit("MOVQ idx+72(FP), R10")
	transpose16(func(t, reg int) {
		skip := fmt.Sprintf("%s_skip%d", name, t)
		emit("BTQ $%d, R9", first+t)
		emit("JCC %s", skip)
		emit("MOVLQSX %d(R10), R11", 4*(first+t))
		if rb == 16 {
			emit("VMOVUPS Z%d, (DI)(R11*1)", reg)
		} else {
			emit("VMOVUPS Y%d, (DI)(R11*1)", reg)
		}
		label(skip)
	})
}

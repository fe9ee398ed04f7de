package main

import "fmt"

// qBatchAMXFused is qBatchAMX with each group's dots consumed while they sit
// in L1: per block of 16 rows, group by group, one TDPBUSD, its 16×16 dots
// stored to a 1 KiB buffer and at once combined into the block's
// accumulators (16 rows × 16 lanes × 16 tokens, 16 KiB in work), where
// qBatchAMX wrote all of a block's dots (groups KiB) before combining any.
// Each accumulator still receives its groups in ascending order, starting
// from +0 (the first 16 groups add to +0 in a register), so the results are
// bitwise qBatchAMX's. scales and biases are not the rows' bf16 parameters
// but their float32 conversion by qScalesT: per block of 16 rows, per group
// (gpad of them), the 16 rows' values; biases at tail bytes after scales.
//
// Registers: DI dst, BX blocks left, SI weights of the block (the group
// counter inside the group loop), DX row stride, R8 codes at group g, R10
// xqT at group g, R11 = 64, R9 the dots buffer, AX dsT at group g, CX the
// block's converted scales at group g, R12 the biases' offset from them, R13
// the accumulators of lane g mod 16 (row r at +1024·r), R15 lanes left before
// the lane wraps.
//
// work: results (1 KiB), accumulators (16 KiB), the dots buffer (1 KiB).
func qBatchAMXFused() {
	const name = "qBatchAMXFused"
	batchText(name)
	emit("LEAQ amxTiles<>(SB), AX")
	amxBytes("LDTILECFG (AX)", 0xC4, 0xE2, 0x78, 0x49, 0x00)
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ w+8(FP), SI")
	emit("MOVQ stride+16(FP), DX")
	emit("MOVQ scales+24(FP), CX")
	rowBlocks(name, 4)
	emit("VPXORD Z31, Z31, Z31")
	label(name + "_block")
	emit("MOVQ SI, R8")
	emit("MOVQ xqT+56(FP), R10")
	emit("MOVQ $64, R11")
	emit("MOVQ work+88(FP), R9")
	emit("ADDQ $%d, R9", 1024+16384)
	emit("MOVQ dsT+64(FP), AX")
	emit("MOVQ tail+96(FP), R12")
	emit("MOVQ work+88(FP), R13")
	emit("ADDQ $1024, R13")

	firstGroups(name, "SI", "", fusedGroup)
	emit("MOVQ work+88(FP), R13")
	emit("ADDQ $1024, R13")
	emit("MOVQ $16, R15")
	label(name + "_group")
	fusedGroup(false)
	emit("ADDQ $64, R13")
	emit("DECQ R15")
	emit("JNZ %s_nowrap", name)
	emit("SUBQ $1024, R13")
	emit("MOVQ $16, R15")
	label(name + "_nowrap")
	emit("DECQ SI")
	emit("JNZ %s_group", name)

	foldAccumulators(name, func() {
		emit("MOVQ work+88(FP), R13")
		emit("ADDQ $1024, R13")
	})
	emit("VPXORD Z31, Z31, Z31")

	comment("next block: weights 16 rows on, converted scales gpad groups on")
	emit("MOVQ groups+48(FP), SI")
	emit("SHLQ $6, SI")
	emit("NEGQ SI")
	emit("ADDQ R8, SI")
	emit("LEAQ (SI)(DX*8), SI")
	emit("LEAQ (SI)(DX*8), SI")
	emit("MOVQ groups+48(FP), R11")
	scalesPastPadding()
	emit("DECQ BX")
	emit("JNZ %s_block", name)
	label(name + "_done")
	amxBytes("TILERELEASE", 0xC4, 0xE2, 0x78, 0x49, 0xC0)
	emit("VZEROUPPER")
	emit("RET")
}

// fusedGroup is one group of qBatchAMXFused: its dots by AMX, then per row
// v = (s·dx)·float(d) + b·Σx added to the row's accumulator of this lane
// (first: to +0 instead of the stored accumulator).
func fusedGroup(first bool) {
	tileLoad(4, 8, 2)   // codes of group g, 16 rows
	tileLoad(6, 10, 11) // xqT of group g
	tileZero(0)
	tdpbusd(0, 4, 6)
	tileStore(9, 11, 0)
	emit("VMOVUPS (AX), Z20")   // dx of the 16 tokens
	emit("VMOVUPS 64(AX), Z21") // Σx
	for r := range 16 {
		emit("VCVTDQ2PS %d(R9), Z16", 64*r)
		emit("VMULPS.BCST %d(CX), Z20, Z17", 4*r)
		emit("VMULPS Z16, Z17, Z17")
		emit("VMULPS.BCST %d(CX)(R12*1), Z21, Z18", 4*r)
		emit("VADDPS Z18, Z17, Z17")
		if first {
			emit("VADDPS Z31, Z17, Z17")
		} else {
			emit("VADDPS %d(R13), Z17, Z17", 1024*r)
		}
		emit("VMOVUPS Z17, %d(R13)", 1024*r)
	}
	emit("ADDQ $64, R8")
	emit("ADDQ $1024, R10")
	emit("ADDQ $128, AX")
	emit("ADDQ $64, CX")
}

// qScalesT converts the bf16 scales and biases of rows (a multiple of 16)
// rows of groups groups to float32 for qBatchAMXFused: per block of 16 rows,
// per group g < gpad (groups rounded up to 16; the padding is 0), the 16
// rows' values (64 bytes); the biases follow the scales after
// rows/16·gpad·64 bytes. tail masks the last block of 16 groups.
func qScalesT() {
	const name = "qScalesT"
	text(name, "(dst *float32, scales, biases *byte, rows, groups, tail int)", 0, 48)
	emit("MOVQ tail+40(FP), AX")
	emit("KMOVW AX, K2")
	emit("MOVQ groups+32(FP), R12")
	emit("SHLQ $1, R12") // a row's parameters in bytes
	// R13 = the biases' offset: rows/16 · gpad · 64.
	emit("MOVQ groups+32(FP), R13")
	emit("ADDQ $15, R13")
	emit("ANDQ $-16, R13")
	emit("MOVQ rows+24(FP), AX")
	emit("SHRQ $4, AX")
	emit("IMULQ AX, R13")
	emit("SHLQ $6, R13")
	for pass, src := range []string{"scales+8(FP)", "biases+16(FP)"} {
		p := fmt.Sprintf("%s_%d", name, pass)
		emit("MOVQ dst+0(FP), DI")
		if pass == 1 {
			emit("ADDQ R13, DI")
		}
		emit("MOVQ %s, SI", src)
		emit("MOVQ rows+24(FP), BX")
		emit("SHRQ $4, BX")
		emit("TESTQ BX, BX")
		emit("JZ %s_done", p)
		label(p + "_block")
		emit("MOVQ SI, R8") // row 0 of the block at group block 0
		emit("MOVQ groups+32(FP), CX")
		emit("ADDQ $15, CX")
		emit("SHRQ $4, CX")
		label(p + "_gb")
		emit("MOVQ R8, R9")
		emit("CMPQ CX, $1")
		emit("JEQ %s_last", p)
		for r := range 16 {
			emit("VPMOVZXWD (R9), Z%d", r)
			if r < 15 {
				emit("ADDQ R12, R9")
			}
		}
		emit("JMP %s_have", p)
		label(p + "_last")
		for r := range 16 {
			emit("VPMOVZXWD.Z (R9), K2, Z%d", r)
			if r < 15 {
				emit("ADDQ R12, R9")
			}
		}
		label(p + "_have")
		for r := range 16 {
			emit("VPSLLD $16, Z%d, Z%d", r, r)
		}
		transpose16(func(t, reg int) {
			emit("VMOVUPS Z%d, %d(DI)", reg, 64*t)
		})
		emit("ADDQ $1024, DI")
		emit("ADDQ $32, R8")
		emit("DECQ CX")
		emit("JNZ %s_gb", p)
		// Next block of rows: 16 rows of parameters on.
		emit("MOVQ R12, AX")
		emit("SHLQ $4, AX")
		emit("ADDQ AX, SI")
		emit("DECQ BX")
		emit("JNZ %s_block", p)
		label(p + "_done")
	}
	emit("VZEROUPPER")
	emit("RET")
}

// qBatchAVX512Fused is qBatchAVX512x16 with each group's dots combined
// while they are still in registers, the way qBatchAMXFused combines its
// tile's: per block of 16 rows, group by group, the 16×16 dots of
// vnniPhase1x16 are left in Z0–Z15 and at once converted, scaled and added
// to the block's accumulators (16 rows × 16 lanes × 16 tokens, 16 KiB in
// work, aligned to 1 KiB so the lane wraps on a bit test), instead of being
// stored for a second pass that reloads them and each row's dx and Σx. Each
// accumulator receives its groups in ascending order from +0, so the
// results are bitwise qBatchAVX512x16's. scales is the rows' parameters
// converted by qScalesT, the biases tail bytes after the scales.
//
// Registers: DI dst, BX blocks left, R8, R9, AX, R11 rows 0, 4, 8 and 12 of
// the block at group g, DX row stride, R14 3·stride, R10 xqT at group g, SI
// dsT at group g, CX the block's converted scales at group g, R12 the
// biases' offset from them, R13 the accumulators of lane g mod 16 (row r at
// +1024·r), R15 groups left.
//
// work: results (1 KiB), then the accumulators at the next 1 KiB boundary.
func qBatchAVX512Fused() {
	const name = "qBatchAVX512Fused"
	batchText(name)
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ w+8(FP), R8")
	emit("MOVQ stride+16(FP), DX")
	emit("MOVQ scales+24(FP), CX")
	rowBlocks(name, 4)
	label(name + "_block")
	emit("LEAQ (DX)(DX*2), R14")
	emit("LEAQ (R8)(DX*4), R9")
	emit("LEAQ (R9)(DX*4), AX")
	emit("LEAQ (AX)(DX*4), R11")
	emit("MOVQ xqT+56(FP), R10")
	emit("MOVQ dsT+64(FP), SI")
	emit("MOVQ tail+96(FP), R12")
	accBase("R13")

	firstGroups(name, "R15", "Z22", fusedGroupVNNI)
	restGroupsWrapping(name, fusedGroupVNNI)

	foldAccumulators(name, func() { accBase("R13") })

	comment("next block: weights 16 rows on, converted scales gpad groups on")
	emit("MOVQ groups+48(FP), R11")
	emit("MOVQ R11, R12")
	emit("SHLQ $6, R12")
	emit("SUBQ R12, R8")
	emit("LEAQ (R8)(DX*8), R8")
	emit("LEAQ (R8)(DX*8), R8")
	scalesPastPadding()
	emit("DECQ BX")
	emit("JNZ %s_block", name)
	label(name + "_done")
	emit("VZEROUPPER")
	emit("RET")
}

// accBase sets reg to qBatchAVX512Fused's accumulators: the first 1 KiB
// boundary at or past work + 1 KiB.
func accBase(reg string) {
	emit("MOVQ work+88(FP), %s", reg)
	emit("ADDQ $2047, %s", reg)
	emit("ANDQ $-1024, %s", reg)
}

// rowBlocks sets BX to the blocks of 2^shift rows and jumps to name_done
// when there are none.
func rowBlocks(name string, shift int) {
	emit("MOVQ rows+40(FP), BX")
	emit("SHRQ $%d, BX", shift)
	emit("TESTQ BX, BX")
	emit("JZ %s_done", name)
}

// scalesPastPadding moves CX, the converted scales moved on by groups·64
// (groups in R11), to the next block's: the block's scales span gpad·64.
// It clobbers R12.
func scalesPastPadding() {
	emit("MOVQ R11, R12")
	emit("ADDQ $15, R12")
	emit("ANDQ $-16, R12")
	emit("SUBQ R11, R12")
	emit("SHLQ $6, R12")
	emit("ADDQ R12, CX")
}

// firstGroups starts a fused kernel's group loop (labels p_…, groups
// counted down in counter): the first min(groups, 16) groups through
// group(true), each into the next lane of the accumulators at R13; with
// fewer than 16 groups, the lanes past the last are set to +0 (Z31, or the
// register zero, cleared first) and it jumps to p_fold; else it goes on with
// counter the groups left, or to p_fold when none are.
func firstGroups(p, counter, zero string, group func(first bool)) {
	comment("the first 16 groups (or all, if fewer): accumulators = +0 + v")
	emit("MOVQ groups+48(FP), %s", counter)
	emit("CMPQ %s, $16", counter)
	emit("JLE %s_firstn", p)
	emit("MOVQ $16, %s", counter)
	label(p + "_firstn")
	label(p + "_first")
	group(true)
	emit("ADDQ $64, R13")
	emit("DECQ %s", counter)
	emit("JNZ %s_first", p)

	comment("fewer than 16 groups: the lanes past the last stay +0")
	emit("MOVQ groups+48(FP), %s", counter)
	emit("CMPQ %s, $16", counter)
	emit("JGE %s_rest", p)
	emit("NEGQ %s", counter)
	emit("ADDQ $16, %s", counter)
	if zero == "" {
		zero = "Z31"
	} else {
		emit("VPXORD %s, %s, %s", zero, zero, zero)
	}
	label(p + "_zero")
	for r := range 16 {
		emit("VMOVUPS %s, %d(R13)", zero, 1024*r)
	}
	emit("ADDQ $64, R13")
	emit("DECQ %s", counter)
	emit("JNZ %s_zero", p)
	emit("JMP %s_fold", p)

	comment("the other groups: accumulators += v, lane g mod 16")
	label(p + "_rest")
	emit("SUBQ $16, %s", counter)
	emit("JZ %s_fold", p)
}

// restGroupsWrapping runs the groups R15 counts through group(false), each
// into the next lane of the 1 KiB-aligned accumulators at R13, wrapping
// back to lane 0 after lane 15.
func restGroupsWrapping(p string, group func(first bool)) {
	accBase("R13")
	label(p + "_group")
	group(false)
	emit("ADDQ $64, R13")
	emit("TESTQ $1023, R13")
	emit("JNZ %s_nowrap", p)
	emit("SUBQ $1024, R13")
	label(p + "_nowrap")
	emit("DECQ R15")
	emit("JNZ %s_group", p)
}

// fusedGroupVNNI is one group of qBatchAVX512Fused: the dots of 16 rows ×
// 16 tokens into Z0–Z15 as vnniPhase1x16 computes them, then per row v =
// (s·dx)·float(d) + b·Σx added to the row's accumulator of this lane (first:
// to +0 instead of the stored accumulator). Z16–Z23 hold a half's
// activations, then dx, Σx and +0; Z24–Z31 the broadcast weights, then four
// rows' temporaries.
func fusedGroupVNNI(first bool) {
	vnniDots16()
	emit("VMOVUPS (SI), Z20")   // dx of the 16 tokens
	emit("VMOVUPS 64(SI), Z21") // Σx
	if first {
		emit("VPXORD Z22, Z22, Z22")
	}
	for r := range 16 {
		t, u := 24+2*(r%4), 25+2*(r%4)
		emit("VCVTDQ2PS Z%d, Z%d", r, r)
		emit("VMULPS.BCST %d(CX), Z20, Z%d", 4*r, t)
		emit("VMULPS Z%d, Z%d, Z%d", r, t, t)
		emit("VMULPS.BCST %d(CX)(R12*1), Z21, Z%d", 4*r, u)
		emit("VADDPS Z%d, Z%d, Z%d", u, t, t)
		if first {
			emit("VADDPS Z22, Z%d, Z%d", t, t)
		} else {
			emit("VADDPS %d(R13), Z%d, Z%d", 1024*r, t, t)
		}
		emit("VMOVUPS Z%d, %d(R13)", t, 1024*r)
	}
	for _, b := range vnniRowBases {
		emit("ADDQ $64, %s", b)
	}
	emit("ADDQ $1024, R10")
	emit("ADDQ $128, SI")
	emit("ADDQ $64, CX")
}

// foldAccumulators folds each of a block's 16 rows' 16 accumulators
// (1 KiB apart, the first at R13 as setBase sets it) into the results and
// stores them transposed to dst.
func foldAccumulators(name string, setBase func()) {
	foldRows(name, "per row: fold its 16 accumulators (reduce16) into the results", setBase)
	transposeStore(name, 16)
}

// foldRows is foldAccumulators up to the store (at label name_fold, with
// the comment what): 16 rows of results at work.
func foldRows(name, what string, setBase func()) {
	label(name + "_fold")
	comment(what)
	setBase()
	emit("MOVQ work+88(FP), R14")
	emit("MOVQ $16, R15")
	label(name + "_row")
	for l := range 16 {
		emit("VMOVUPS %d(R13), Z%d", 64*l, l)
	}
	fold16()
	emit("VMOVUPS Z0, (R14)")
	emit("ADDQ $1024, R13")
	emit("ADDQ $64, R14")
	emit("DECQ R15")
	emit("JNZ %s_row", name)
}

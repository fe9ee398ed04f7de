package main

import "fmt"

// The batched kernels (qbatch_amd64.go): one Q8 (or unpacked Q4) matrix
// against a block of 16 tokens at once, the token in the vector lane.
//
// Per group g of a row, the 16 tokens' integer dots are 16 VPDPBUSD of the
// row's 4-byte weight words (broadcast) against the block's activations in
// VNNI order (xqT: dword k of group g holds the 16 tokens' bytes 4k..4k+3),
// so no horizontal reduction is needed; eight rows run at once so that each
// activation vector, held in a register, serves eight rows. The dots (exact
// int32, whatever the order of the additions) go to a scratch buffer, and a
// second pass applies qRowsGeneric's float combination per row, lane = token:
// m = s·dx, t = m·float(d), u = b·Σx, v = t+u, acc[g mod 16] += v in group
// order, then the 16 accumulators fold by halving. Every token sees exactly
// the float operations of the reference, in the same order, so each output is
// bitwise qRowsGeneric's.
func batchKernels() {
	qBatchAVX512()
	qUnpackQ4AVX512()
}

// qBatchAVX512 registers:
//
//	DI dst (token 0 of the current row; the others through the idx offsets)
//	SI weights of the current block of 8 rows   DX row stride   R14 3·stride
//	R12 scales of the current row   R15 biases of the current row
//	BX blocks of 8 rows left
//	phase 1: R8, R9 rows 0 and 4 of the block at group g; R10 xqT at group g;
//	         R13 dots of group g; CX groups left
//	phase 2: R11 rows left in the block; R13 dots of the row; R10 dots at the
//	         current group; R9 dsT at the current group; AX converted scales
//	         at the current group, R8 the offset of the converted biases from
//	         them; CX blocks / groups left
//
// work: converted scales (gpad float32, gpad = groups rounded up to 16), then
// converted biases (gpad), then the dots, [groups][8 rows][16 tokens] int32.
func qBatchAVX512() {
	const name = "qBatchAVX512"
	out.WriteString("\n// func qBatchAVX512(dst *float32, w *byte, stride int, scales, biases *byte, rows, groups int, xqT *int8, dsT *float32, idx *int32, mask int, work *byte, tail int)\n")
	fmt.Fprintf(&out, "TEXT ·%s(SB), NOSPLIT, $0-104\n", name)
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ w+8(FP), SI")
	emit("MOVQ stride+16(FP), DX")
	emit("LEAQ (DX)(DX*2), R14")
	emit("MOVQ scales+24(FP), R12")
	emit("MOVQ biases+32(FP), R15")
	emit("MOVQ rows+40(FP), BX")
	emit("SHRQ $3, BX")
	emit("TESTQ BX, BX")
	emit("JZ %s_done", name)
	label(name + "_block")

	comment("phase 1: the dots of 8 rows × 16 tokens, group by group")
	emit("MOVQ SI, R8")
	emit("LEAQ (SI)(DX*4), R9")
	emit("MOVQ xqT+56(FP), R10")
	dotsBase("R13")
	emit("MOVQ groups+48(FP), CX")
	label(name + "_group")
	for k := range 16 {
		emit("VMOVDQU32 %d(R10), Z%d", 64*k, 16+k)
	}
	for r := range 8 {
		emit("VPXORD Z%d, Z%d, Z%d", r, r, r)
	}
	rowAddr := []string{"(R8)", "(R8)(DX*1)", "(R8)(DX*2)", "(R8)(R14*1)", "(R9)", "(R9)(DX*1)", "(R9)(DX*2)", "(R9)(R14*1)"}
	for k := range 16 {
		for r := range 8 {
			emit("VPBROADCASTD %d%s, Z%d", 4*k, rowAddr[r], 8+r)
			emit("VPDPBUSD Z%d, Z%d, Z%d", 16+k, 8+r, r)
		}
	}
	for r := range 8 {
		emit("VMOVDQU32 Z%d, %d(R13)", r, 64*r)
	}
	emit("ADDQ $64, R8")
	emit("ADDQ $64, R9")
	emit("ADDQ $1024, R10")
	emit("ADDQ $512, R13")
	emit("DECQ CX")
	emit("JNZ %s_group", name)

	comment("phase 2: per row, the float combination of its dots, lane = token")
	dotsBase("R13")
	emit("MOVQ $8, R11")
	label(name + "_row")

	comment("the row's bf16 scales and biases to float32 (the last block masked)")
	emit("MOVQ work+88(FP), AX")
	gpadBytes("R8")
	emit("MOVQ tail+96(FP), R9")
	emit("KMOVW R9, K2")
	emit("MOVQ groups+48(FP), CX")
	emit("ADDQ $15, CX")
	emit("SHRQ $4, CX")
	emit("MOVQ R12, R9")
	emit("MOVQ R15, R10")
	label(name + "_cvt")
	emit("CMPQ CX, $1")
	emit("JEQ %s_cvtlast", name)
	emit("VPMOVZXWD (R9), Z16")
	emit("VPMOVZXWD (R10), Z17")
	emit("JMP %s_cvtstore", name)
	label(name + "_cvtlast")
	emit("VPMOVZXWD.Z (R9), K2, Z16")
	emit("VPMOVZXWD.Z (R10), K2, Z17")
	label(name + "_cvtstore")
	emit("VPSLLD $16, Z16, Z16")
	emit("VPSLLD $16, Z17, Z17")
	emit("VMOVDQU32 Z16, (AX)")
	emit("VMOVDQU32 Z17, (AX)(R8*1)")
	emit("ADDQ $32, R9")
	emit("ADDQ $32, R10")
	emit("ADDQ $64, AX")
	emit("DECQ CX")
	emit("JNZ %s_cvt", name)
	emit("MOVQ groups+48(FP), CX")
	emit("SHLQ $1, CX")
	emit("ADDQ CX, R12")
	emit("ADDQ CX, R15")

	comment("acc[g mod 16] += (s·dx)·float(d) + b·Σx, lane = token, groups in order")
	emit("MOVQ work+88(FP), AX")
	emit("MOVQ dsT+64(FP), R9")
	emit("MOVQ R13, R10")
	for l := range 16 {
		emit("VPXORD Z%d, Z%d, Z%d", l, l, l)
	}
	emit("MOVQ groups+48(FP), CX")
	emit("SHRQ $4, CX")
	emit("JZ %s_tail", name)
	label(name + "_full")
	for l := range 16 {
		laneStep(l)
	}
	emit("ADDQ $2048, R9")
	emit("ADDQ $8192, R10")
	emit("ADDQ $64, AX")
	emit("DECQ CX")
	emit("JNZ %s_full", name)
	label(name + "_tail")
	emit("MOVQ groups+48(FP), CX")
	emit("ANDQ $15, CX")
	emit("JZ %s_reduce", name)
	for l := range 15 {
		laneStep(l)
		if l < 14 {
			emit("CMPQ CX, $%d", l+1)
			emit("JEQ %s_reduce", name)
		}
	}
	label(name + "_reduce")
	comment("fold the 16 accumulators by halving (reduce16), scatter to the tokens")
	for _, h := range []int{8, 4, 2, 1} {
		for i := range h {
			emit("VADDPS Z%d, Z%d, Z%d", i+h, i, i)
		}
	}
	emit("MOVQ idx+72(FP), CX")
	emit("VMOVDQU32 (CX), Z19")
	emit("MOVQ mask+80(FP), CX")
	emit("KMOVW CX, K1")
	emit("VSCATTERDPS Z0, K1, (DI)(Z19*1)")
	emit("ADDQ $4, DI")
	emit("ADDQ $64, R13")
	emit("DECQ R11")
	emit("JNZ %s_row", name)
	emit("LEAQ (SI)(DX*8), SI")
	emit("DECQ BX")
	emit("JNZ %s_block", name)
	label(name + "_done")
	emit("VZEROUPPER")
	emit("RET")
}

// laneStep adds group 16b+l of the current block to accumulator l: R9 dsT
// (dx then Σx of the 16 tokens, 128 bytes per group), R10 the dots (512
// bytes per group), AX the converted scales, (AX)(R8*1) the biases.
func laneStep(l int) {
	emit("VMOVUPS %d(R9), Z16", 128*l)
	emit("VMULPS.BCST %d(AX), Z16, Z16", 4*l)
	emit("VCVTDQ2PS %d(R10), Z17", 512*l)
	emit("VMULPS Z17, Z16, Z16")
	emit("VMOVUPS %d(R9), Z18", 128*l+64)
	emit("VMULPS.BCST %d(AX)(R8*1), Z18, Z18", 4*l)
	emit("VADDPS Z18, Z16, Z16")
	emit("VADDPS Z16, Z%d, Z%d", l, l)
}

// dotsBase sets reg to the dots buffer: work + 8·gpad.
func dotsBase(reg string) {
	emit("MOVQ groups+48(FP), %s", reg)
	emit("ADDQ $15, %s", reg)
	emit("ANDQ $-16, %s", reg)
	emit("SHLQ $3, %s", reg)
	emit("ADDQ work+88(FP), %s", reg)
}

// gpadBytes sets reg to 4·gpad, the converted biases' offset from the scales.
func gpadBytes(reg string) {
	emit("MOVQ groups+48(FP), %s", reg)
	emit("ADDQ $15, %s", reg)
	emit("ANDQ $-16, %s", reg)
	emit("SHLQ $2, %s", reg)
}

// qUnpackQ4AVX512 unpacks rows of Q4 codes to one byte per code, each group
// of 64 as its 32 even elements then its 32 odd ones (the low nibbles of its
// 32 bytes, then the high ones), so that qBatchAVX512 reads Q4 as Q8.
func qUnpackQ4AVX512() {
	const name = "qUnpackQ4AVX512"
	out.WriteString("\n// func qUnpackQ4AVX512(dst, w *byte, rows, groups int)\n")
	fmt.Fprintf(&out, "TEXT ·%s(SB), NOSPLIT, $0-32\n", name)
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ w+8(FP), SI")
	emit("MOVQ rows+16(FP), BX")
	emit("MOVQ groups+24(FP), R8")
	emit("MOVL $0x0F0F0F0F, AX")
	emit("VPBROADCASTD AX, Z31")
	emit("TESTQ BX, BX")
	emit("JZ %s_done", name)
	label(name + "_row")
	emit("MOVQ R8, CX")
	emit("SHRQ $1, CX")
	emit("JZ %s_odd", name)
	label(name + "_pair")
	comment("64 bytes = groups A, B: lows [A even | B even], highs [A odd | B odd]")
	emit("VMOVDQU64 (SI), Z0")
	emit("VPANDD Z31, Z0, Z1")
	emit("VPSRLW $4, Z0, Z2")
	emit("VPANDD Z31, Z2, Z2")
	emit("VSHUFI64X2 $0x44, Z2, Z1, Z3")
	emit("VSHUFI64X2 $0xEE, Z2, Z1, Z4")
	emit("VMOVDQU64 Z3, (DI)")
	emit("VMOVDQU64 Z4, 64(DI)")
	emit("ADDQ $64, SI")
	emit("ADDQ $128, DI")
	emit("DECQ CX")
	emit("JNZ %s_pair", name)
	label(name + "_odd")
	emit("TESTQ $1, R8")
	emit("JZ %s_next", name)
	emit("VMOVDQU (SI), Y0")
	emit("VPANDD Z31, Z0, Z1")
	emit("VPSRLW $4, Z0, Z2")
	emit("VPANDD Z31, Z2, Z2")
	emit("VINSERTI64X4 $1, Y2, Z1, Z3")
	emit("VMOVDQU64 Z3, (DI)")
	emit("ADDQ $32, SI")
	emit("ADDQ $64, DI")
	label(name + "_next")
	emit("DECQ BX")
	emit("JNZ %s_row", name)
	label(name + "_done")
	emit("VZEROUPPER")
	emit("RET")
}

package main

import (
	"fmt"
	"strings"
)

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
	out.WriteString(`
// The AMX tile configuration of qBatchAMX: palette 1, tiles 0–7 of 16 rows
// of 64 bytes.
DATA amxTiles<>+0(SB)/8, $1
DATA amxTiles<>+8(SB)/8, $0
DATA amxTiles<>+16(SB)/8, $0x0040004000400040
DATA amxTiles<>+24(SB)/8, $0x0040004000400040
DATA amxTiles<>+32(SB)/8, $0
DATA amxTiles<>+40(SB)/8, $0
DATA amxTiles<>+48(SB)/8, $0x1010101010101010
DATA amxTiles<>+56(SB)/8, $0
GLOBL amxTiles<>(SB), RODATA|NOPTR, $64
`)
	qBatchKernel("qBatchAVX512", phase1VNNI8)
	qBatchKernel("qBatchAVX512x16", phase1VNNI16)
	qBatchKernel("qBatchAMX", phase1AMX)
	qBatchAMXFused()
	qBatchAVX512Fused()
	qBatchAVX512Fused2()
	qScalesT()
	qUnpackQ4AVX512()
	qBatchAVX2()
	qBatchAVX2Q4()
	qWidenQ8AVX2()
	qUnpackQ4AVX2()
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
// work: a block's results (16 rows × 16 tokens float32), converted scales (gpad float32, gpad = groups rounded up to 16), then
// converted biases (gpad), then the dots, [groups][rb rows][16 tokens] int32.
//
// With phase1AMX, phase 1 is one AMX TDPBUSD per group and block of 16 rows
// (tiles: A = 16 rows × the group's 64 code bytes, B = the group's xqT, 16
// dwords × 16 tokens; C = the 16×16 int32 dots, exact); with phase1VNNI16,
// 16 rows at a time with AVX-512 VNNI; both take rows in multiples of 16.
// With phase1VNNI8, eight rows at a time with AVX-512 VNNI, rows a multiple
// of 8.
type phase1Kind int

const (
	phase1VNNI8 phase1Kind = iota
	phase1VNNI16
	phase1AMX
)

func qBatchKernel(name string, p1 phase1Kind) {
	amx := p1 == phase1AMX
	rb := 8
	if p1 != phase1VNNI8 {
		rb = 16
	}
	batchText(name)
	if amx {
		emit("LEAQ amxTiles<>(SB), AX")
		amxBytes("LDTILECFG (AX)", 0xC4, 0xE2, 0x78, 0x49, 0x00)
	}
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ w+8(FP), SI")
	emit("MOVQ stride+16(FP), DX")
	emit("MOVQ scales+24(FP), R12")
	emit("MOVQ biases+32(FP), R15")
	rowBlocks(name, map[int]int{16: 4, 8: 3}[rb])
	label(name + "_block")
	switch p1 {
	case phase1AMX:
		amxPhase1(name)
	case phase1VNNI16:
		vnniPhase1x16(name)
	default:
		vnniPhase1(name)
	}
	phase2(name, rb)
	if rb == 16 {
		emit("LEAQ (SI)(DX*8), SI")
	}
	emit("LEAQ (SI)(DX*8), SI")
	emit("DECQ BX")
	emit("JNZ %s_block", name)
	label(name + "_done")
	if amx {
		amxBytes("TILERELEASE", 0xC4, 0xE2, 0x78, 0x49, 0xC0)
	}
	emit("VZEROUPPER")
	emit("RET")
}

// amxPhase1 computes the dots of 16 rows × 16 tokens, group by group (one
// TDPBUSD each, four groups in flight): R8 the rows' codes at group g, DX the
// row stride, R10 xqT at group g, R11 = 64, R9 the dots at group g, CX
// groups left.
func amxPhase1(name string) {
	comment("phase 1: the dots of 16 rows × 16 tokens, group by group (AMX)")
	emit("MOVQ SI, R8")
	emit("MOVQ xqT+56(FP), R10")
	emit("MOVQ $64, R11")
	dotsBase("R9")
	// Four groups at a time: C tiles 0–3, A tiles 4–5 and B tiles 6–7 in
	// turn, so that a product does not wait for the previous one's store.
	emit("MOVQ groups+48(FP), CX")
	emit("SHRQ $2, CX")
	emit("JZ %s_amxrest", name)
	label(name + "_amxquad")
	for i := range 4 {
		a, b := 4+i%2, 6+i%2
		tileLoad(a, 8, 2)   // codes of group g+i
		tileLoad(b, 10, 11) // xqT of group g+i
		tileZero(i)
		tdpbusd(i, a, b)
		emit("ADDQ $64, R8")
		emit("ADDQ $1024, R10")
	}
	for i := range 4 {
		tileStore(9, 11, i)
		emit("ADDQ $1024, R9")
	}
	emit("DECQ CX")
	emit("JNZ %s_amxquad", name)
	label(name + "_amxrest")
	emit("MOVQ groups+48(FP), CX")
	emit("ANDQ $3, CX")
	emit("JZ %s_amxdone", name)
	label(name + "_amxone")
	tileLoad(4, 8, 2)
	tileLoad(6, 10, 11)
	tileZero(0)
	tdpbusd(0, 4, 6)
	tileStore(9, 11, 0)
	emit("ADDQ $64, R8")
	emit("ADDQ $1024, R10")
	emit("ADDQ $1024, R9")
	emit("DECQ CX")
	emit("JNZ %s_amxone", name)
	label(name + "_amxdone")
}

func tileZero(t int) {
	amxBytes(fmt.Sprintf("TILEZERO tmm%d", t), 0xC4, 0xE2, 0x7B, 0x49, byte(0xC0|t<<3))
}

// The Go assembler has no AMX mnemonics: the instructions are written as
// bytes (VEX encoded; register numbers AX=0 … R15=15, tiles 0–7).
func amxBytes(what string, b ...byte) {
	var sb []string
	for _, x := range b {
		sb = append(sb, fmt.Sprintf("BYTE $0x%02X", x))
	}
	emit("%s // %s", strings.Join(sb, "; "), what)
}

// sibVEX is the VEX prefix and ModRM/SIB bytes of a tile load or store of
// tile t at (base)(index*1); pp is 3 (F2, TILELOADD) or 2 (F3, TILESTORED).
// base must not be BP or R13 (they need a displacement) and index not SP.
func sibVEX(pp byte, t, base, index int) []byte {
	if base&7 == 5 || index == 4 {
		panic("sibVEX: unsupported register")
	}
	b1 := byte(0x02) | 0x80 // R̄ = 1: tiles are 0–7
	if index < 8 {
		b1 |= 0x40
	}
	if base < 8 {
		b1 |= 0x20
	}
	return []byte{0xC4, b1, 0x78 | pp, 0x4B, byte(t<<3 | 4), byte((index&7)<<3 | base&7)}
}

var regNames = []string{"AX", "CX", "DX", "BX", "SP", "BP", "SI", "DI", "R8", "R9", "R10", "R11", "R12", "R13", "R14", "R15"}

func tileLoad(t, base, index int) {
	amxBytes(fmt.Sprintf("TILELOADD tmm%d, (%s)(%s*1)", t, regNames[base], regNames[index]), sibVEX(3, t, base, index)...)
}

func tileStore(base, index, t int) {
	amxBytes(fmt.Sprintf("TILESTORED (%s)(%s*1), tmm%d", regNames[base], regNames[index], t), sibVEX(2, t, base, index)...)
}

// tdpbusd is TDPBUSD tmm_c, tmm_a, tmm_b: c += a (unsigned bytes) · b (signed
// bytes), per 4-byte group, exact int32.
func tdpbusd(c, a, b int) {
	amxBytes(fmt.Sprintf("TDPBUSD tmm%d, tmm%d, tmm%d", c, a, b), 0xC4, 0xE2, byte((15-b)<<3|1), 0x5E, byte(0xC0|c<<3|a))
}

// vnniPhase1 computes the dots of 8 rows × 16 tokens, group by group.
func vnniPhase1(name string) {
	comment("phase 1: the dots of 8 rows × 16 tokens, group by group")
	emit("LEAQ (DX)(DX*2), R14")
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
}

// vnniPhase1x16 computes the dots of 16 rows × 16 tokens, group by group,
// in the layout amxPhase1 leaves ([group][16 rows][16 tokens]). Sixteen
// accumulators, one per row, where vnniPhase1 has eight: a VPDPBUSD's
// latency is several cycles, and eight independent chains leave the units
// idle (about 1.3 of 2 per cycle on Zen 5, measured); sixteen keep them
// busy. The group's 16 activation dwords no longer fit in registers beside
// them, so they load in two halves of eight: Z0–Z15 accumulate, Z16–Z23
// hold a half's activations, Z24–Z31 the broadcast weight words.
// R8, R9, AX, R11: rows 0, 4, 8 and 12 of the block at group g.
func vnniPhase1x16(name string) {
	comment("phase 1: the dots of 16 rows × 16 tokens, group by group")
	emit("LEAQ (DX)(DX*2), R14")
	emit("MOVQ SI, R8")
	emit("LEAQ (SI)(DX*4), R9")
	emit("LEAQ (R9)(DX*4), AX")
	emit("LEAQ (AX)(DX*4), R11")
	emit("MOVQ xqT+56(FP), R10")
	dotsBase("R13")
	emit("MOVQ groups+48(FP), CX")
	label(name + "_group")
	vnniDots16()
	for r := range 16 {
		emit("VMOVDQU32 Z%d, %d(R13)", r, 64*r)
	}
	for _, b := range vnniRowBases {
		emit("ADDQ $64, %s", b)
	}
	emit("ADDQ $1024, R10")
	emit("ADDQ $1024, R13")
	emit("DECQ CX")
	emit("JNZ %s_group", name)
}

// phase2 applies the float combination to the dots of a block of rb rows.
func phase2(name string, rb int) {
	comment("phase 2: per row, the float combination of its dots, lane = token")
	dotsBase("R13")
	emit("MOVQ work+88(FP), R14")
	emit("MOVQ $%d, R11", rb)
	label(name + "_row")

	comment("the row's bf16 scales and biases to float32 (the last block masked)")
	emit("MOVQ work+88(FP), AX")
	emit("ADDQ $1024, AX")
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
	emit("ADDQ $1024, AX")
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
		laneStep(l, rb)
	}
	emit("ADDQ $2048, R9")
	emit("ADDQ $%d, R10", 16*rb*64)
	emit("ADDQ $64, AX")
	emit("DECQ CX")
	emit("JNZ %s_full", name)
	label(name + "_tail")
	emit("MOVQ groups+48(FP), CX")
	emit("ANDQ $15, CX")
	emit("JZ %s_reduce", name)
	for l := range 15 {
		laneStep(l, rb)
		if l < 14 {
			emit("CMPQ CX, $%d", l+1)
			emit("JEQ %s_reduce", name)
		}
	}
	label(name + "_reduce")
	comment("fold the 16 accumulators by halving (reduce16)")
	fold16()
	emit("VMOVUPS Z0, (R14)")
	emit("ADDQ $64, R14")
	emit("ADDQ $64, R13")
	emit("DECQ R11")
	emit("JNZ %s_row", name)
	transposeStore(name, rb)
}

// transposeStore writes the block's results, rb rows × 16 tokens at work
// (64 bytes per row), to dst: token t's rb floats at DI + idx[t], for the
// tokens in mask; DI moves on by rb rows. A 16×16 transpose in registers
// (rows past rb zero), so each token gets one contiguous store, where a
// scatter would write 16 lines a multiple of 4 KiB apart (one L1 set).
func transposeStore(name string, rb int) {
	comment("transpose rows × tokens to tokens × rows, store each token's rows")
	emit("MOVQ work+88(FP), R14")
	for r := range 16 {
		if r < rb {
			emit("VMOVUPS %d(R14), Z%d", 64*r, r)
		} else {
			emit("VPXORD Z%d, Z%d, Z%d", r, r, r)
		}
	}
	emit("MOVQ mask+80(FP), R9")
	emit("MOVQ idx+72(FP), R10")
	transpose16(func(t, reg int) {
		skip := fmt.Sprintf("%s_skip%d", name, t)
		emit("BTQ $%d, R9", t)
		emit("JCC %s", skip)
		emit("MOVLQSX %d(R10), R11", 4*t)
		if rb == 16 {
			emit("VMOVUPS Z%d, (DI)(R11*1)", reg)
		} else {
			emit("VMOVUPS Y%d, (DI)(R11*1)", reg)
		}
		label(skip)
	})
	emit("ADDQ $%d, DI", 4*rb)
}

// transpose16 transposes the 16×16 float32 matrix in Z0–Z15 (row i in Zi)
// and hands out each column t (the 16 rows' lane t, row i in lane i) in a
// register for out; it clobbers Z0–Z23.
func transpose16(out func(t, reg int)) {
	// Stage 1: pairs of rows interleaved per 128-bit lane.
	for i := range 8 {
		emit("VUNPCKLPS Z%d, Z%d, Z%d", 2*i+1, 2*i, 16+2*i)
		emit("VUNPCKHPS Z%d, Z%d, Z%d", 2*i+1, 2*i, 17+2*i)
	}
	// Stage 2: u[4i+j] holds rows 4i..4i+3 of columns j, 4+j, 8+j, 12+j.
	for i := range 4 {
		a, b, c, d := 16+4*i, 17+4*i, 18+4*i, 19+4*i
		emit("VUNPCKLPD Z%d, Z%d, Z%d", c, a, 4*i)
		emit("VUNPCKHPD Z%d, Z%d, Z%d", c, a, 4*i+1)
		emit("VUNPCKLPD Z%d, Z%d, Z%d", d, b, 4*i+2)
		emit("VUNPCKHPD Z%d, Z%d, Z%d", d, b, 4*i+3)
	}
	// Stages 3 and 4, per j: column 4L+j = lane L of u[j], u[4+j], u[8+j], u[12+j].
	for j := range 4 {
		emit("VSHUFF32X4 $0x88, Z%d, Z%d, Z16", 4+j, j)
		emit("VSHUFF32X4 $0xDD, Z%d, Z%d, Z17", 4+j, j)
		emit("VSHUFF32X4 $0x88, Z%d, Z%d, Z18", 12+j, 8+j)
		emit("VSHUFF32X4 $0xDD, Z%d, Z%d, Z19", 12+j, 8+j)
		emit("VSHUFF32X4 $0x88, Z18, Z16, Z20") // L = 0
		emit("VSHUFF32X4 $0x88, Z19, Z17, Z21") // L = 1
		emit("VSHUFF32X4 $0xDD, Z18, Z16, Z22") // L = 2
		emit("VSHUFF32X4 $0xDD, Z19, Z17, Z23") // L = 3
		for L := range 4 {
			out(4*L+j, 20+L)
		}
	}
}

// laneStep adds group 16b+l of the current block to accumulator l: R9 dsT
// (dx then Σx of the 16 tokens, 128 bytes per group), R10 the dots (rb·64
// bytes per group), AX the converted scales, (AX)(R8*1) the biases.
func laneStep(l, rb int) {
	emit("VMOVUPS %d(R9), Z16", 128*l)
	emit("VMULPS.BCST %d(AX), Z16, Z16", 4*l)
	emit("VCVTDQ2PS %d(R10), Z17", rb*64*l)
	emit("VMULPS Z17, Z16, Z16")
	emit("VMOVUPS %d(R9), Z18", 128*l+64)
	emit("VMULPS.BCST %d(AX)(R8*1), Z18, Z18", 4*l)
	emit("VADDPS Z18, Z16, Z16")
	emit("VADDPS Z16, Z%d, Z%d", l, l)
}

// dotsBase sets reg to the dots buffer: work + 1024 + 8·gpad.
func dotsBase(reg string) {
	emit("MOVQ groups+48(FP), %s", reg)
	emit("ADDQ $15, %s", reg)
	emit("ANDQ $-16, %s", reg)
	emit("SHLQ $3, %s", reg)
	emit("ADDQ work+88(FP), %s", reg)
	emit("ADDQ $1024, %s", reg)
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

// fold16 adds Z0–Z15 into Z0 by halving (8, 4, 2, 1), the reference's
// reduce16 order.
func fold16() {
	for _, h := range []int{8, 4, 2, 1} {
		for i := range h {
			emit("VADDPS Z%d, Z%d, Z%d", i+h, i, i)
		}
	}
}

// vnniRowBases hold rows 0, 4, 8 and 12 of a 16-row block; rows r+1..r+3
// are at stride DX, 2·DX and R14 = 3·DX from them.
var vnniRowBases = []string{"R8", "R9", "AX", "R11"}

// vnniDots16 sets Z0–Z15 to one group's dots of 16 rows × 16 tokens: each
// row's 4-byte weights broadcast (Z24–Z31) against the tokens' activations
// at R10 (Z16–Z23, half a group at a time).
func vnniDots16() {
	for r := range 16 {
		emit("VPXORD Z%d, Z%d, Z%d", r, r, r)
	}
	offs := []string{"", "(DX*1)", "(DX*2)", "(R14*1)"}
	for half := range 2 {
		for k := range 8 {
			emit("VMOVDQU32 %d(R10), Z%d", 64*(8*half+k), 16+k)
		}
		for k := range 8 {
			kk := 8*half + k
			for r := range 16 {
				emit("VPBROADCASTD %d(%s)%s, Z%d", 4*kk, vnniRowBases[r/4], offs[r%4], 24+r%8)
				emit("VPDPBUSD Z%d, Z%d, Z%d", 16+k, 24+r%8, r)
			}
		}
	}
}

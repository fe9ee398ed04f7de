package main

import "fmt"

// qBatchAVX2 is the batched kernel for CPUs with AVX2 but no AVX-512 VNNI:
// the same 16-token blocks (xqT, dsT), outputs bitwise qRowsGeneric's.
// AVX2 has no byte dot product that cannot saturate on Q8's codes
// (VPMADDUBSW's pairs reach 2·255·127 > 32767), so both operands go to
// int16 and VPMADDWD makes exact int32 sums of pairs: the weights widened
// once per row chunk (qWidenQ8AVX2: a uint16 per code), the activations per
// dword of the block as they are loaded (VPMOVSXBW of four tokens' 4 bytes). A register then holds
// four tokens × two pair sums; two rows run at once, each with its four
// such registers, and per group the pair sums of a token are added
// (VPHADDD, then VPERMQ back to token order): exact int32 dots, as any
// order of integer additions gives.
//
// The float combination is qBatchAVX512Fused's, lane = token: per row, per
// group, per 8 tokens, v = (s·dx)·float(d) + b·Σx added to the row's
// accumulator of lane g mod 16 (in work, zeroed per block of rows: the
// reference's +0 start), then the 16 accumulators fold by halving (reduce16)
// and each valid token's two results are stored at dst + idx[t].
//
// Registers: DI dst at the block's first row, SI the block's widened
// weights at group g (row 1 at +DX), DX row stride in bytes (2·cols), R8
// and R9 the block's bf16 scales and biases at group g (row 1 at +R12 =
// 2·groups), R10 xqT at group g, R11 dsT at group g, R13 the accumulators
// of lane g mod 16 (row r at +1024·r, tokens 8h.. at +32·h), R14 groups
// left, R15 lanes left before the lane wraps, BX row blocks left.
//
// work: accumulators (2 KiB), then the block's results (2 rows × 16 tokens).
func qBatchAVX2() { qBatchAVX2Kernel("qBatchAVX2", false) }

// qBatchAVX2Q4 is qBatchAVX2 for Q4's codes (0–15), unpacked to a byte
// each (qUnpackQ4AVX2): with them VPMADDUBSW cannot saturate, even summed
// over 8 dwords in int16 (8·2·15·128 = 30720), so a register takes 8
// tokens × 4 codes in one instruction, half the multiplies of VPMADDWD,
// and the activations need no widening. Per half of a group's 16 dwords
// the int16 sums widen to int32 by VPMADDWD with ones, already in token
// order. w holds a byte per code, stride bytes apart.
func qBatchAVX2Q4() { qBatchAVX2Kernel("qBatchAVX2Q4", true) }

func qBatchAVX2Kernel(name string, q4 bool) {
	batchText(name)
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ w+8(FP), SI")
	emit("MOVQ stride+16(FP), DX")
	if !q4 {
		emit("SHLQ $1, DX")
	}
	emit("MOVQ scales+24(FP), R8")
	emit("MOVQ biases+32(FP), R9")
	emit("MOVQ groups+48(FP), R12")
	emit("SHLQ $1, R12")
	rowBlocks(name, 1)
	label(name + "_block")
	comment("accumulators = +0")
	emit("MOVQ work+88(FP), R13")
	emit("VXORPS Y0, Y0, Y0")
	for i := range 64 {
		emit("VMOVUPS Y0, %d(R13)", 32*i)
	}
	emit("MOVQ xqT+56(FP), R10")
	emit("MOVQ dsT+64(FP), R11")
	emit("MOVQ groups+48(FP), R14")
	emit("MOVQ $16, R15")
	if q4 {
		emit("MOVL $0x00010001, AX")
		emit("MOVQ AX, X15")
		emit("VPBROADCASTD X15, Y15")
	}
	label(name + "_group")
	if q4 {
		avx2BatchDotsQ4()
		avx2BatchCombine(true)
		emit("ADDQ $64, SI")
	} else {
		avx2BatchDots()
		avx2BatchCombine(false)
		emit("ADDQ $128, SI")
	}
	emit("ADDQ $2, R8")
	emit("ADDQ $2, R9")
	emit("ADDQ $1024, R10")
	emit("ADDQ $128, R11")
	emit("ADDQ $64, R13")
	emit("DECQ R15")
	emit("JNZ %s_nowrap", name)
	emit("SUBQ $1024, R13")
	emit("MOVQ $16, R15")
	label(name + "_nowrap")
	emit("DECQ R14")
	emit("JNZ %s_group", name)
	avx2BatchFold()
	avx2BatchStore(name)
	comment("next block: two rows on")
	emit("MOVQ groups+48(FP), AX")
	if q4 {
		emit("SHLQ $6, AX")
	} else {
		emit("SHLQ $7, AX")
	}
	emit("SUBQ AX, SI")
	emit("LEAQ (SI)(DX*2), SI")
	emit("SUBQ R12, R8")
	emit("LEAQ (R8)(R12*2), R8")
	emit("SUBQ R12, R9")
	emit("LEAQ (R9)(R12*2), R9")
	emit("ADDQ $8, DI")
	emit("DECQ BX")
	emit("JNZ %s_block", name)
	label(name + "_done")
	emit("VZEROUPPER")
	emit("RET")
}

// avx2BatchDots sets Y0–Y3 (row 0) and Y4–Y7 (row 1) to group g's pair
// sums from the widened codes: register 4r+q holds tokens 4q..4q+3, two
// int32 sums each.
func avx2BatchDots() {
	for k := range 16 {
		for q := range 4 {
			emit("VPMOVSXBW %d(R10), Y%d", 64*k+16*q, 8+q)
		}
		emit("VPBROADCASTQ %d(SI), Y12", 8*k)
		emit("VPBROADCASTQ %d(SI)(DX*1), Y13", 8*k)
		for q := range 4 {
			for r := range 2 {
				acc, w, tmp := 4*r+q, 12+r, 14+r
				if k == 0 {
					emit("VPMADDWD Y%d, Y%d, Y%d", 8+q, w, acc)
				} else {
					emit("VPMADDWD Y%d, Y%d, Y%d", 8+q, w, tmp)
					emit("VPADDD Y%d, Y%d, Y%d", tmp, acc, acc)
				}
			}
		}
	}
}

// avx2BatchDotsQ4 sets Y4+2r+h to group g's int32 dots of row r, tokens
// 8h..8h+7, from a byte per code (Y0–Y3 the int16 sums of a half group, Y15
// int16 ones).
func avx2BatchDotsQ4() {
	for half := range 2 {
		for k := 8 * half; k < 8*half+8; k++ {
			emit("VMOVDQU %d(R10), Y8", 64*k)
			emit("VMOVDQU %d(R10), Y9", 64*k+32)
			emit("VPBROADCASTD %d(SI), Y10", 4*k)
			emit("VPBROADCASTD %d(SI)(DX*1), Y11", 4*k)
			for r := range 2 {
				for h := range 2 {
					acc, tmp := 2*r+h, 12+(2*r+h)%3 // Y15 holds the ones
					if k == 8*half {
						emit("VPMADDUBSW Y%d, Y%d, Y%d", 8+h, 10+r, acc)
					} else {
						emit("VPMADDUBSW Y%d, Y%d, Y%d", 8+h, 10+r, tmp)
						emit("VPADDW Y%d, Y%d, Y%d", tmp, acc, acc)
					}
				}
			}
		}
		for i := range 4 {
			if half == 0 {
				emit("VPMADDWD Y15, Y%d, Y%d", i, 4+i)
			} else {
				emit("VPMADDWD Y15, Y%d, Y%d", i, i)
				emit("VPADDD Y%d, Y%d, Y%d", i, 4+i, 4+i)
			}
		}
	}
}

// avx2Dots is the register holding row r's dots of tokens 8h.. after
// avx2BatchDots (q4: avx2BatchDotsQ4).
func avx2Dots(q4 bool, r, h int) int {
	if q4 {
		return 4 + 2*r + h
	}
	return 4*r + 2*h
}

// avx2BatchCombine turns qBatchAVX2's pair sums into each token's dot and
// adds v = (s·dx)·float(d) + b·Σx to the accumulators; qBatchAVX2Q4's dots
// are already in token order.
func avx2BatchCombine(q4 bool) {
	q8 := !q4
	dots := func(r, h int) int { return avx2Dots(q4, r, h) }
	for r := range 2 {
		for h := range 2 {
			d := dots(r, h)
			if q8 {
				emit("VPHADDD Y%d, Y%d, Y%d", d+1, d, d)
				emit("VPERMQ $0xD8, Y%d, Y%d", d, d)
			}
			emit("VCVTDQ2PS Y%d, Y%d", d, d)
		}
	}
	// Temporaries: Y12–Y15 for the Q8 kernel; Y0–Y3 for Q4's (its Y15
	// holds the ones).
	temps := []int{12, 13, 14, 15}
	if !q8 {
		temps = []int{0, 1, 2, 3}
	}
	// bf16 → float32 broadcast: the word in every half of each dword,
	// shifted into the high half.
	params := []string{"(R8)", "(R9)", "(R8)(R12*1)", "(R9)(R12*1)"}
	for i, p := range params {
		emit("VPBROADCASTW %s, Y%d", p, 8+i)
		emit("VPSLLD $16, Y%d, Y%d", 8+i, 8+i)
	}
	for r := range 2 {
		s, b := 8+2*r, 9+2*r
		for h := range 2 {
			d, t, u := dots(r, h), temps[2*h], temps[2*h+1]
			emit("VMULPS %d(R11), Y%d, Y%d", 32*h, s, t)
			emit("VMULPS Y%d, Y%d, Y%d", d, t, t)
			emit("VMULPS %d(R11), Y%d, Y%d", 64+32*h, b, u)
			emit("VADDPS Y%d, Y%d, Y%d", u, t, t)
			emit("VADDPS %d(R13), Y%d, Y%d", 1024*r+32*h, t, t)
			emit("VMOVUPS Y%d, %d(R13)", t, 1024*r+32*h)
		}
	}
}

// avx2BatchFold folds each row's and half's 16 accumulators by halving
// (reduce16) into the results at work+2048 (row r, tokens 8h.. at
// +64·r+32·h).
func avx2BatchFold() {
	comment("fold the accumulators (reduce16) into the results")
	emit("MOVQ work+88(FP), R13")
	for r := range 2 {
		for h := range 2 {
			base := 1024*r + 32*h
			for i := range 8 {
				emit("VMOVUPS %d(R13), Y%d", base+64*i, i)
				emit("VADDPS %d(R13), Y%d, Y%d", base+64*(i+8), i, i)
			}
			for _, half := range []int{4, 2, 1} {
				for i := range half {
					emit("VADDPS Y%d, Y%d, Y%d", i+half, i, i)
				}
			}
			emit("VMOVUPS Y0, %d(R13)", 2048+64*r+32*h)
		}
	}
}

// avx2BatchStore writes each valid token's two results to dst + idx[t].
func avx2BatchStore(name string) {
	comment("store rows 0 and 1 of each token in mask")
	emit("MOVQ mask+80(FP), CX")
	emit("MOVQ idx+72(FP), AX")
	for t := range 16 {
		skip := fmt.Sprintf("%s_skip%d", name, t)
		emit("BTQ $%d, CX", t)
		emit("JCC %s", skip)
		emit("MOVLQSX %d(AX), R14", 4*t)
		emit("MOVL %d(R13), R15", 2048+4*t)
		emit("MOVL R15, (DI)(R14*1)")
		emit("MOVL %d(R13), R15", 2048+64+4*t)
		emit("MOVL R15, 4(DI)(R14*1)")
		label(skip)
	}
}

// qWidenQ8AVX2 widens n (a multiple of 16) Q8 codes to uint16 for
// qBatchAVX2.
func qWidenQ8AVX2() {
	const name = "qWidenQ8AVX2"
	text(name, "(dst *uint16, w *byte, n int)", 0, 24)
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ w+8(FP), SI")
	emit("MOVQ n+16(FP), CX")
	emit("SHRQ $4, CX")
	emit("JZ %s_done", name)
	label(name + "_loop")
	emit("VPMOVZXBW (SI), Y0")
	emit("VMOVDQU Y0, (DI)")
	emit("ADDQ $16, SI")
	emit("ADDQ $32, DI")
	emit("DECQ CX")
	emit("JNZ %s_loop", name)
	label(name + "_done")
	emit("VZEROUPPER")
	emit("RET")
}

// qUnpackQ4AVX2 unpacks groups (n of them, 32 bytes each) of Q4 codes to a
// byte per code, each group as its 32 even elements then its 32 odd ones
// (qUnpackQ4AVX512's layout), for qBatchAVX2Q4.
func qUnpackQ4AVX2() {
	const name = "qUnpackQ4AVX2"
	text(name, "(dst, w *byte, groups int)", 0, 24)
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ w+8(FP), SI")
	emit("MOVQ groups+16(FP), CX")
	emit("MOVL $0x0F0F0F0F, AX")
	emit("MOVQ AX, X15")
	emit("VPBROADCASTD X15, Y15")
	emit("TESTQ CX, CX")
	emit("JZ %s_done", name)
	label(name + "_loop")
	emit("VMOVDQU (SI), Y0")
	emit("VPAND Y15, Y0, Y1")
	emit("VPSRLW $4, Y0, Y2")
	emit("VPAND Y15, Y2, Y2")
	emit("VMOVDQU Y1, (DI)")
	emit("VMOVDQU Y2, 32(DI)")
	emit("ADDQ $32, SI")
	emit("ADDQ $64, DI")
	emit("DECQ CX")
	emit("JNZ %s_loop", name)
	label(name + "_done")
	emit("VZEROUPPER")
	emit("RET")
}

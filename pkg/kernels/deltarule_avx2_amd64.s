//go:build !purego

#include "textflag.h"

// func deltaRuleAVX2(s *float32, rows, cols int, decay, beta float32, k, v, q, o *float32, next int)
//
// deltaRuleAVX512 with 8-lane registers: per block of 32 columns (then of 8),
// pass 1 over the rows sums p += (S·decay)·k[i] in Y0–Y3; δ = (v − p)·β goes
// to Y8–Y11; pass 2 stores S = S·decay + k[i]·δ and sums o += S·q[i] in
// Y0–Y3. Every column's operations are the reference's, in its order, so the
// register width does not change a bit. Pass 1 prefetches the next head's
// state at the same offset, as the AVX-512 kernel does.
TEXT ·deltaRuleAVX2(SB), NOSPLIT, $0-72
	MOVQ s+0(FP), SI
	MOVQ rows+8(FP), CX
	MOVQ cols+16(FP), R9
	VBROADCASTSS decay+24(FP), Y15
	MOVQ k+32(FP), R8
	MOVQ v+40(FP), DX
	MOVQ q+48(FP), BX
	MOVQ o+56(FP), DI
	SHLQ $2, R9              // row stride in bytes
	XORQ R10, R10            // byte offset of the column block
	MOVQ next+64(FP), R15    // bytes from S to what to prefetch (0: nothing)

d2Block:
	MOVQ R9, AX
	SUBQ R10, AX             // bytes of columns left
	JLE  d2Done
	CMPQ AX, $128
	JLT  d2Narrow

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	LEAQ (SI)(R10*1), R11    // &S[0, block]
	MOVQ R8, R12             // &k[0]
	MOVQ CX, R13             // rows left
d2WideP:
	PREFETCHT0 0(R11)(R15*1)
	PREFETCHT0 64(R11)(R15*1)
	VBROADCASTSS (R12), Y13
	VMULPS 0(R11), Y15, Y4
	VMULPS 32(R11), Y15, Y5
	VMULPS 64(R11), Y15, Y6
	VMULPS 96(R11), Y15, Y7
	VMULPS Y13, Y4, Y4
	VMULPS Y13, Y5, Y5
	VMULPS Y13, Y6, Y6
	VMULPS Y13, Y7, Y7
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	ADDQ R9, R11
	ADDQ $4, R12
	DECQ R13
	JNZ  d2WideP
	// δ = (v − p)·β; o starts at zero
	VBROADCASTSS beta+28(FP), Y12
	VMOVUPS 0(DX)(R10*1), Y8
	VSUBPS Y0, Y8, Y8
	VMULPS Y12, Y8, Y8
	VMOVUPS 32(DX)(R10*1), Y9
	VSUBPS Y1, Y9, Y9
	VMULPS Y12, Y9, Y9
	VMOVUPS 64(DX)(R10*1), Y10
	VSUBPS Y2, Y10, Y10
	VMULPS Y12, Y10, Y10
	VMOVUPS 96(DX)(R10*1), Y11
	VSUBPS Y3, Y11, Y11
	VMULPS Y12, Y11, Y11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	LEAQ (SI)(R10*1), R11
	MOVQ R8, R12             // &k[0]
	MOVQ BX, R14             // &q[0]
	MOVQ CX, R13
d2WideU:
	VBROADCASTSS (R12), Y13
	VBROADCASTSS (R14), Y14
	VMULPS 0(R11), Y15, Y4
	VMULPS 32(R11), Y15, Y5
	VMULPS 64(R11), Y15, Y6
	VMULPS 96(R11), Y15, Y7
	VMULPS Y8, Y13, Y12
	VADDPS Y12, Y4, Y4
	VMULPS Y9, Y13, Y12
	VADDPS Y12, Y5, Y5
	VMULPS Y10, Y13, Y12
	VADDPS Y12, Y6, Y6
	VMULPS Y11, Y13, Y12
	VADDPS Y12, Y7, Y7
	VMOVUPS Y4, 0(R11)
	VMOVUPS Y5, 32(R11)
	VMOVUPS Y6, 64(R11)
	VMOVUPS Y7, 96(R11)
	VMULPS Y14, Y4, Y4
	VMULPS Y14, Y5, Y5
	VMULPS Y14, Y6, Y6
	VMULPS Y14, Y7, Y7
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	ADDQ R9, R11
	ADDQ $4, R12
	ADDQ $4, R14
	DECQ R13
	JNZ  d2WideU
	VMOVUPS Y0, 0(DI)(R10*1)
	VMOVUPS Y1, 32(DI)(R10*1)
	VMOVUPS Y2, 64(DI)(R10*1)
	VMOVUPS Y3, 96(DI)(R10*1)
	ADDQ $128, R10
	JMP  d2Block

d2Narrow:
	VXORPS Y0, Y0, Y0
	LEAQ (SI)(R10*1), R11    // &S[0, block]
	MOVQ R8, R12             // &k[0]
	MOVQ CX, R13             // rows left
d2NarrowP:
	PREFETCHT0 0(R11)(R15*1)
	VBROADCASTSS (R12), Y13
	VMULPS 0(R11), Y15, Y4
	VMULPS Y13, Y4, Y4
	VADDPS Y4, Y0, Y0
	ADDQ R9, R11
	ADDQ $4, R12
	DECQ R13
	JNZ  d2NarrowP
	// δ = (v − p)·β; o starts at zero
	VBROADCASTSS beta+28(FP), Y12
	VMOVUPS 0(DX)(R10*1), Y8
	VSUBPS Y0, Y8, Y8
	VMULPS Y12, Y8, Y8
	VXORPS Y0, Y0, Y0
	LEAQ (SI)(R10*1), R11
	MOVQ R8, R12             // &k[0]
	MOVQ BX, R14             // &q[0]
	MOVQ CX, R13
d2NarrowU:
	VBROADCASTSS (R12), Y13
	VBROADCASTSS (R14), Y14
	VMULPS 0(R11), Y15, Y4
	VMULPS Y8, Y13, Y12
	VADDPS Y12, Y4, Y4
	VMOVUPS Y4, 0(R11)
	VMULPS Y14, Y4, Y4
	VADDPS Y4, Y0, Y0
	ADDQ R9, R11
	ADDQ $4, R12
	ADDQ $4, R14
	DECQ R13
	JNZ  d2NarrowU
	VMOVUPS Y0, 0(DI)(R10*1)
	ADDQ $32, R10
	JMP  d2Block

d2Done:
	VZEROUPPER
	RET

//go:build !purego

#include "textflag.h"

// func deltaRuleAVX512(s *float32, rows, cols int, decay, beta float32, k, v, q, o *float32, next int)
//
// deltaRuleGeneric, per block of 64 columns (then of 16): pass 1 over the rows stores
// S·decay back to S and sums p += (S·decay)·k[i] in Z0–Z3; δ = (v − p)·β goes to
// Z8–Z11; pass 2 over the rows (now in L1) stores S = (S·decay) + k[i]·δ, reading the
// decayed S pass 1 left instead of multiplying again (the same rounded value: the
// multiplies, not the loads, bound this loop), and sums o += S·q[i] in Z0–Z3.
// Pass 1 also prefetches the memory next bytes after S at the same offset when next is
// not 0: a decode step runs the value heads of a layer in order, and each head's state
// follows the last; a prefill chunk runs one head over its tokens (next 0).
TEXT ·deltaRuleAVX512(SB), NOSPLIT, $0-72
	MOVQ s+0(FP), SI
	MOVQ rows+8(FP), CX
	MOVQ cols+16(FP), R9
	VBROADCASTSS decay+24(FP), Z31
	VBROADCASTSS beta+28(FP), Z27
	MOVQ k+32(FP), R8
	MOVQ v+40(FP), DX
	MOVQ q+48(FP), BX
	MOVQ o+56(FP), DI
	SHLQ $2, R9              // row stride in bytes
	XORQ R10, R10            // byte offset of the column block
	MOVQ next+64(FP), R15    // bytes from S to what to prefetch (0: nothing)

drBlock:
	MOVQ R9, AX
	SUBQ R10, AX             // bytes of columns left
	JLE  drDone
	CMPQ AX, $256
	JLT  drNarrow
	JMP  drWide

drWide:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	LEAQ (SI)(R10*1), R11    // &S[0, block]
	MOVQ R8, R12             // &k[0]
	MOVQ CX, R13             // rows left
	TESTQ R15, R15
	JZ   drWidePN
drWideP:
	PREFETCHT0 0(R11)(R15*1)
	PREFETCHT0 64(R11)(R15*1)
	PREFETCHT0 128(R11)(R15*1)
	PREFETCHT0 192(R11)(R15*1)
	VBROADCASTSS (R12), Z30
	VMULPS 0(R11), Z31, Z4
	VMULPS 64(R11), Z31, Z5
	VMULPS 128(R11), Z31, Z6
	VMULPS 192(R11), Z31, Z7
	VMOVUPS Z4, 0(R11)
	VMOVUPS Z5, 64(R11)
	VMOVUPS Z6, 128(R11)
	VMOVUPS Z7, 192(R11)
	VMULPS Z30, Z4, Z4
	VMULPS Z30, Z5, Z5
	VMULPS Z30, Z6, Z6
	VMULPS Z30, Z7, Z7
	VADDPS Z4, Z0, Z0
	VADDPS Z5, Z1, Z1
	VADDPS Z6, Z2, Z2
	VADDPS Z7, Z3, Z3
	ADDQ R9, R11
	ADDQ $4, R12
	DECQ R13
	JNZ  drWideP
	JMP  drWideD
drWidePN:
	VBROADCASTSS (R12), Z30
	VMULPS 0(R11), Z31, Z4
	VMULPS 64(R11), Z31, Z5
	VMULPS 128(R11), Z31, Z6
	VMULPS 192(R11), Z31, Z7
	VMOVUPS Z4, 0(R11)
	VMOVUPS Z5, 64(R11)
	VMOVUPS Z6, 128(R11)
	VMOVUPS Z7, 192(R11)
	VMULPS Z30, Z4, Z4
	VMULPS Z30, Z5, Z5
	VMULPS Z30, Z6, Z6
	VMULPS Z30, Z7, Z7
	VADDPS Z4, Z0, Z0
	VADDPS Z5, Z1, Z1
	VADDPS Z6, Z2, Z2
	VADDPS Z7, Z3, Z3
	ADDQ R9, R11
	ADDQ $4, R12
	DECQ R13
	JNZ  drWidePN
drWideD:
	// δ = (v − p)·β; o starts at zero
	VMOVUPS 0(DX)(R10*1), Z8
	VSUBPS Z0, Z8, Z8
	VMULPS Z27, Z8, Z8
	VPXORD Z0, Z0, Z0
	VMOVUPS 64(DX)(R10*1), Z9
	VSUBPS Z1, Z9, Z9
	VMULPS Z27, Z9, Z9
	VPXORD Z1, Z1, Z1
	VMOVUPS 128(DX)(R10*1), Z10
	VSUBPS Z2, Z10, Z10
	VMULPS Z27, Z10, Z10
	VPXORD Z2, Z2, Z2
	VMOVUPS 192(DX)(R10*1), Z11
	VSUBPS Z3, Z11, Z11
	VMULPS Z27, Z11, Z11
	VPXORD Z3, Z3, Z3
	LEAQ (SI)(R10*1), R11
	MOVQ R8, R12             // &k[0]
	MOVQ BX, R14             // &q[0]
	MOVQ CX, R13
drWideU:
	VBROADCASTSS (R12), Z30
	VBROADCASTSS (R14), Z29
	VMULPS Z8, Z30, Z12
	VMULPS Z9, Z30, Z13
	VMULPS Z10, Z30, Z14
	VMULPS Z11, Z30, Z15
	VADDPS 0(R11), Z12, Z4
	VADDPS 64(R11), Z13, Z5
	VADDPS 128(R11), Z14, Z6
	VADDPS 192(R11), Z15, Z7
	VMOVUPS Z4, 0(R11)
	VMOVUPS Z5, 64(R11)
	VMOVUPS Z6, 128(R11)
	VMOVUPS Z7, 192(R11)
	VMULPS Z29, Z4, Z4
	VMULPS Z29, Z5, Z5
	VMULPS Z29, Z6, Z6
	VMULPS Z29, Z7, Z7
	VADDPS Z4, Z0, Z0
	VADDPS Z5, Z1, Z1
	VADDPS Z6, Z2, Z2
	VADDPS Z7, Z3, Z3
	ADDQ R9, R11
	ADDQ $4, R12
	ADDQ $4, R14
	DECQ R13
	JNZ  drWideU
	VMOVUPS Z0, 0(DI)(R10*1)
	VMOVUPS Z1, 64(DI)(R10*1)
	VMOVUPS Z2, 128(DI)(R10*1)
	VMOVUPS Z3, 192(DI)(R10*1)
	ADDQ $256, R10
	JMP  drBlock

drNarrow:
	VPXORD Z0, Z0, Z0
	LEAQ (SI)(R10*1), R11    // &S[0, block]
	MOVQ R8, R12             // &k[0]
	MOVQ CX, R13             // rows left
	TESTQ R15, R15
	JZ   drNarrowPN
drNarrowP:
	PREFETCHT0 0(R11)(R15*1)
	VBROADCASTSS (R12), Z30
	VMULPS 0(R11), Z31, Z4
	VMOVUPS Z4, 0(R11)
	VMULPS Z30, Z4, Z4
	VADDPS Z4, Z0, Z0
	ADDQ R9, R11
	ADDQ $4, R12
	DECQ R13
	JNZ  drNarrowP
	JMP  drNarrowD
drNarrowPN:
	VBROADCASTSS (R12), Z30
	VMULPS 0(R11), Z31, Z4
	VMOVUPS Z4, 0(R11)
	VMULPS Z30, Z4, Z4
	VADDPS Z4, Z0, Z0
	ADDQ R9, R11
	ADDQ $4, R12
	DECQ R13
	JNZ  drNarrowPN
drNarrowD:
	// δ = (v − p)·β; o starts at zero
	VMOVUPS 0(DX)(R10*1), Z8
	VSUBPS Z0, Z8, Z8
	VMULPS Z27, Z8, Z8
	VPXORD Z0, Z0, Z0
	LEAQ (SI)(R10*1), R11
	MOVQ R8, R12             // &k[0]
	MOVQ BX, R14             // &q[0]
	MOVQ CX, R13
drNarrowU:
	VBROADCASTSS (R12), Z30
	VBROADCASTSS (R14), Z29
	VMULPS Z8, Z30, Z12
	VADDPS 0(R11), Z12, Z4
	VMOVUPS Z4, 0(R11)
	VMULPS Z29, Z4, Z4
	VADDPS Z4, Z0, Z0
	ADDQ R9, R11
	ADDQ $4, R12
	ADDQ $4, R14
	DECQ R13
	JNZ  drNarrowU
	VMOVUPS Z0, 0(DI)(R10*1)
	ADDQ $64, R10
	JMP  drBlock

drDone:
	VZEROUPPER
	RET

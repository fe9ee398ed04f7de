//go:build !purego

#include "textflag.h"

// func activateAVX512(dst, x, y *float32, n, mode int)
// activateGeneric, 16 lanes at a time: the same operations in the same order,
// each rounded on its own (no fused multiply-add), so bit for bit equal.
// Mode 4 (actExp) is expGeneric, the shift read from y.
TEXT ·activateAVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ mode+32(FP), R8
	MOVL $0x80000000, AX // sign
	VPBROADCASTD AX, Z16
	MOVL $0xc2ae0000, AX // lo
	VPBROADCASTD AX, Z17
	MOVL $0x42b00000, AX // hi
	VPBROADCASTD AX, Z18
	MOVL $0x3fb8aa3b, AX // log2e
	VPBROADCASTD AX, Z19
	MOVL $0x3f318000, AX // ln2Hi
	VPBROADCASTD AX, Z20
	MOVL $0xb95e8083, AX // ln2Lo
	VPBROADCASTD AX, Z21
	MOVL $0x39506967, AX // c0
	VPBROADCASTD AX, Z22
	MOVL $0x3ab743ce, AX // c1
	VPBROADCASTD AX, Z23
	MOVL $0x3c088908, AX // c2
	VPBROADCASTD AX, Z24
	MOVL $0x3d2aa9c1, AX // c3
	VPBROADCASTD AX, Z25
	MOVL $0x3e2aaaaa, AX // c4
	VPBROADCASTD AX, Z26
	MOVL $0x3f000000, AX // c5
	VPBROADCASTD AX, Z27
	MOVL $0x3f800000, AX // one
	VPBROADCASTD AX, Z28
	MOVL $0x7f, AX // bias
	VPBROADCASTD AX, Z29
	CMPQ R8, $4
	JNE lanes
	VBROADCASTSS (DX), Z15 // the shift
lanes:
	MOVQ $-1, AX
	KMOVW AX, K1 // all 16 lanes until the tail
loop:
	CMPQ CX, $16
	JAE full
	TESTQ CX, CX
	JZ done
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1 // the last n lanes
full:
	VMOVUPS.Z (SI), K1, Z0 // x
	CMPQ R8, $4
	JEQ shifted
	VPXORD Z16, Z0, Z2 // z = -x
	JMP clamp
shifted:
	VSUBPS Z15, Z0, Z2 // z = x - shift
clamp:
	// clamp z to [lo, hi]; z is the second source, so a NaN z passes through
	VMAXPS Z2, Z17, Z2
	VMINPS Z2, Z18, Z2
	VMULPS Z19, Z2, Z3 // z·log2e
	VRNDSCALEPS $0, Z3, Z3 // n, to nearest even
	VMULPS Z20, Z3, Z4
	VSUBPS Z4, Z2, Z5 // r = z - n·ln2Hi
	VMULPS Z21, Z3, Z4
	VSUBPS Z4, Z5, Z5 // r -= n·ln2Lo
	VMULPS Z5, Z5, Z6 // r²
	VMULPS Z5, Z22, Z7 // p = c0·r + c1, then Horner
	VADDPS Z23, Z7, Z7
	VMULPS Z5, Z7, Z7
	VADDPS Z24, Z7, Z7
	VMULPS Z5, Z7, Z7
	VADDPS Z25, Z7, Z7
	VMULPS Z5, Z7, Z7
	VADDPS Z26, Z7, Z7
	VMULPS Z5, Z7, Z7
	VADDPS Z27, Z7, Z7
	VMULPS Z6, Z7, Z7 // p·r² + r + 1
	VADDPS Z5, Z7, Z7
	VADDPS Z28, Z7, Z7
	VCVTPS2DQ Z3, Z8 // 2ⁿ from the exponent bits
	VPADDD Z29, Z8, Z8
	VPSLLD $23, Z8, Z8
	VMULPS Z8, Z7, Z7 // e^z
	CMPQ R8, $4
	JNE sigmoid
	VMOVAPS Z7, Z9
	JMP store
sigmoid:
	VADDPS Z28, Z7, Z7
	VDIVPS Z7, Z28, Z9 // s = 1/(1+e^-x)
	CMPQ R8, $0
	JEQ store
	CMPQ R8, $3
	JEQ mulsig
	VMULPS Z9, Z0, Z9 // x·s
	CMPQ R8, $1
	JEQ store
	VMOVUPS.Z (DX), K1, Z1
	VMULPS Z1, Z9, Z9 // (x·s)·y
	JMP store
mulsig:
	VMOVUPS.Z (DX), K1, Z1
	VMULPS Z9, Z1, Z9 // y·s
store:
	VMOVUPS Z9, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, DX
	SUBQ $16, CX
	JG loop
done:
	VZEROUPPER
	RET

//go:build !purego

#include "textflag.h"

// REDUCE8 folds the 8 lanes of Y into X's lane 0 in the reference order
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), using T as scratch.
#define REDUCE8(Y, X, TY, TX) \
	VEXTRACTF128 $1, Y, TX \
	VADDPS TX, X, X \
	VMOVHLPS X, X, TX \
	VADDPS TX, X, X \
	VMOVSHDUP X, TX \
	VADDSS TX, X, X

// BF16x8 widens the 8 bfloat16 at addr into Y (as float32).
#define BF16x8(addr, Y) \
	VPMOVZXWD addr, Y \
	VPSLLD $16, Y, Y

// D4STEP adds 8 columns of the four rows at SI, R9, R10, R11 (byte offset
// W) times x at DI (byte offset X) to the lane accumulators Y0–Y3.
#define D4STEP(W, X) \
	VMOVUPS X(DI), Y8 \
	BF16x8(W(SI), Y4) \
	BF16x8(W(R9), Y5) \
	BF16x8(W(R10), Y6) \
	BF16x8(W(R11), Y7) \
	VMULPS Y8, Y4, Y4 \
	VMULPS Y8, Y5, Y5 \
	VMULPS Y8, Y6, Y6 \
	VMULPS Y8, Y7, Y7 \
	VADDPS Y4, Y0, Y0 \
	VADDPS Y5, Y1, Y1 \
	VADDPS Y6, Y2, Y2 \
	VADDPS Y7, Y3, Y3

// func dotBF16AVX2(w *byte, x *float32, n int) float32
//
// Lane l accumulates w[i]·x[i] for i ≡ l (mod 8), in element order.
TEXT ·dotBF16AVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0

d1Loop:
	BF16x8((SI), Y1)
	VMULPS (DI), Y1, Y1
	VADDPS Y1, Y0, Y0
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  d1Loop

	REDUCE8(Y0, X0, Y1, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotBF16x4AVX2(dst *[4]float32, w *byte, stride int, x *float32, n int)
//
// dotBF16AVX2 of four rows at once (independent chains hide the add
// latency). Rows are often a page long (2048 columns), and the hardware
// prefetcher does not follow a stream into the next page, so while it reads
// a 64-byte column block of the four rows it prefetches the same block of
// the next four.
TEXT ·dotBF16x4AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), R8
	MOVQ w+8(FP), SI
	MOVQ stride+16(FP), DX
	MOVQ x+24(FP), DI
	MOVQ n+32(FP), CX
	LEAQ (SI)(DX*1), R9
	LEAQ (R9)(DX*1), R10
	LEAQ (R10)(DX*1), R11
	LEAQ (DX*4), R12
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

d4Block:
	CMPQ CX, $32
	JLT  d4Tail
	PREFETCHT0 (SI)(R12*1)
	PREFETCHT0 (R9)(R12*1)
	PREFETCHT0 (R10)(R12*1)
	PREFETCHT0 (R11)(R12*1)
	D4STEP(0, 0)
	D4STEP(16, 32)
	D4STEP(32, 64)
	D4STEP(48, 96)
	ADDQ $64, SI
	ADDQ $64, R9
	ADDQ $64, R10
	ADDQ $64, R11
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  d4Block

d4Tail:
	TESTQ CX, CX
	JZ    d4Done
	D4STEP(0, 0)
	ADDQ $16, SI
	ADDQ $16, R9
	ADDQ $16, R10
	ADDQ $16, R11
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  d4Tail

d4Done:
	REDUCE8(Y0, X0, Y4, X4)
	REDUCE8(Y1, X1, Y5, X5)
	REDUCE8(Y2, X2, Y6, X6)
	REDUCE8(Y3, X3, Y7, X7)
	VMOVSS X0, 0(R8)
	VMOVSS X1, 4(R8)
	VMOVSS X2, 8(R8)
	VMOVSS X3, 12(R8)
	VZEROUPPER
	RET

// REDUCE4 folds X's 4 lanes into lane 0 as (l0+l1)+(l2+l3), T scratch.
#define REDUCE4(X, T) \
	VMOVSHDUP X, T \
	VADDPS T, X, X \
	VMOVHLPS X, X, T \
	VADDSS T, X, X

// func dotRows4AVX(dst, a *float32, n int, b *float32)
//
// dst[0..3] = rows 0..3 of a (n floats apart) · b: one 4-lane accumulator
// per row (four independent chains), n a positive multiple of 4.
TEXT ·dotRows4AVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), R8
	MOVQ a+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ b+24(FP), DI
	MOVQ CX, DX
	SHLQ $2, DX              // row stride in bytes
	LEAQ (SI)(DX*1), R9
	LEAQ (R9)(DX*1), R10
	LEAQ (R10)(DX*1), R11
	VXORPS X0, X0, X0
	VXORPS X1, X1, X1
	VXORPS X2, X2, X2
	VXORPS X3, X3, X3
	XORQ AX, AX

drLoop:
	VMOVUPS (DI)(AX*1), X4
	VMULPS (SI)(AX*1), X4, X5
	VMULPS (R9)(AX*1), X4, X6
	VMULPS (R10)(AX*1), X4, X7
	VMULPS (R11)(AX*1), X4, X8
	VADDPS X5, X0, X0
	VADDPS X6, X1, X1
	VADDPS X7, X2, X2
	VADDPS X8, X3, X3
	ADDQ $16, AX
	CMPQ AX, DX
	JLT  drLoop

	REDUCE4(X0, X5)
	REDUCE4(X1, X6)
	REDUCE4(X2, X7)
	REDUCE4(X3, X8)
	VMOVSS X0, 0(R8)
	VMOVSS X1, 4(R8)
	VMOVSS X2, 8(R8)
	VMOVSS X3, 12(R8)
	VZEROUPPER
	RET

// func axpyRowsAVX512(dst *float32, rows, stride int, alpha *float32, x *float32, n int)
//
// Row j of dst (stride floats apart): dst[i] += alpha[j]·x[i] for i < n, n a
// positive multiple of 16.
TEXT ·axpyRowsAVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ rows+8(FP), BX
	MOVQ stride+16(FP), DX
	MOVQ alpha+24(FP), R8
	MOVQ x+32(FP), SI
	MOVQ n+40(FP), CX
	SHLQ $2, DX
	SHLQ $2, CX

axRow:
	VBROADCASTSS (R8), Z31
	XORQ AX, AX

axLoop:
	VMULPS (SI)(AX*1), Z31, Z0
	VADDPS (DI)(AX*1), Z0, Z0
	VMOVUPS Z0, (DI)(AX*1)
	ADDQ $64, AX
	CMPQ AX, CX
	JLT  axLoop

	ADDQ DX, DI
	ADDQ $4, R8
	DECQ BX
	JNZ  axRow
	VZEROUPPER
	RET

// B44ROW widens 8 bfloat16 of a row at addr into both halves of Z.
#define B44ROW(addr, Y, Z) \
	VPMOVZXWD addr, Y \
	VPSLLD $16, Y, Y \
	VINSERTF32X8 $1, Y, Z, Z

// B44STEP adds 8 columns of the four rows at SI, R9, R10, R11 (byte offset
// W) times the four tokens' x at DI, DI+R12, DI+2·R12, DI+R13 (byte offset
// X) to the accumulators: Z(2r+p) holds row r against token 2p in its low
// half and token 2p+1 in its high half.
#define B44STEP(W, X) \
	VMOVUPS X(DI), Y12 \
	VINSERTF32X8 $1, X(DI)(R12*1), Z12, Z12 \
	VMOVUPS X(DI)(R12*2), Y13 \
	VINSERTF32X8 $1, X(DI)(R13*1), Z13, Z13 \
	B44ROW(W(SI), Y8, Z8) \
	B44ROW(W(R9), Y9, Z9) \
	B44ROW(W(R10), Y10, Z10) \
	B44ROW(W(R11), Y11, Z11) \
	VMULPS Z12, Z8, Z16 \
	VMULPS Z13, Z8, Z17 \
	VMULPS Z12, Z9, Z18 \
	VMULPS Z13, Z9, Z19 \
	VMULPS Z12, Z10, Z20 \
	VMULPS Z13, Z10, Z21 \
	VMULPS Z12, Z11, Z22 \
	VMULPS Z13, Z11, Z23 \
	VADDPS Z16, Z0, Z0 \
	VADDPS Z17, Z1, Z1 \
	VADDPS Z18, Z2, Z2 \
	VADDPS Z19, Z3, Z3 \
	VADDPS Z20, Z4, Z4 \
	VADDPS Z21, Z5, Z5 \
	VADDPS Z22, Z6, Z6 \
	VADDPS Z23, Z7, Z7

// B44OUT reduces accumulator Z (row r, tokens 2p and 2p+1) into dst (R8)
// at byte offsets LO (token 2p) and HI (token 2p+1).
#define B44OUT(Z, Y, X, LO, HI) \
	VEXTRACTF32X8 $1, Z, Y14 \
	REDUCE8(Y, X, Y15, X15) \
	VMOVSS X, LO(R8) \
	REDUCE8(Y14, X14, Y15, X15) \
	VMOVSS X14, HI(R8)

// func dotBF16x4x4AVX512(dst *[16]float32, w *byte, stride int, x *float32, xstride int, n int)
//
// dotBF16x4AVX2 for four tokens at once: dst[4t+r] is row r (stride bytes
// apart from w) with token t's x (xstride bytes apart), each lane chain the
// reference's. Two tokens share a 16-lane register, so each widened weight
// vector serves four tokens and eight independent chains hide the add
// latency that bounds the one-token kernel. n is a positive multiple of 8.
TEXT ·dotBF16x4x4AVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), R8
	MOVQ w+8(FP), SI
	MOVQ stride+16(FP), DX
	MOVQ x+24(FP), DI
	MOVQ xstride+32(FP), R12
	MOVQ n+40(FP), CX
	LEAQ (SI)(DX*1), R9
	LEAQ (R9)(DX*1), R10
	LEAQ (R10)(DX*1), R11
	LEAQ (R12)(R12*2), R13
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

b44Block:
	CMPQ CX, $32
	JLT  b44Tail
	B44STEP(0, 0)
	B44STEP(16, 32)
	B44STEP(32, 64)
	B44STEP(48, 96)
	ADDQ $64, SI
	ADDQ $64, R9
	ADDQ $64, R10
	ADDQ $64, R11
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  b44Block

b44Tail:
	TESTQ CX, CX
	JZ    b44Done
	B44STEP(0, 0)
	ADDQ $16, SI
	ADDQ $16, R9
	ADDQ $16, R10
	ADDQ $16, R11
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  b44Tail

b44Done:
	B44OUT(Z0, Y0, X0, 0, 16)
	B44OUT(Z1, Y1, X1, 32, 48)
	B44OUT(Z2, Y2, X2, 4, 20)
	B44OUT(Z3, Y3, X3, 36, 52)
	B44OUT(Z4, Y4, X4, 8, 24)
	B44OUT(Z5, Y5, X5, 40, 56)
	B44OUT(Z6, Y6, X6, 12, 28)
	B44OUT(Z7, Y7, X7, 44, 60)
	VZEROUPPER
	RET

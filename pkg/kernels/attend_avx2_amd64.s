//go:build !purego

#include "textflag.h"

// The AVX2 forms of attendScoresAVX512 and attendValuesAVX512: the same
// products and sums in the same order, on 8-lane registers.

// HSUM4Y folds each 128-bit lane of Y (one head's four dot lanes) into its
// first float as (l0+l1)+(l2+l3), DotRows' order, and scales it by Y15.
#define HSUM4Y(Y, T) \
	VSHUFPS $0xB1, Y, Y, T \
	VADDPS T, Y, Y \
	VSHUFPS $0x4E, Y, Y, T \
	VADDPS T, Y, Y \
	VMULPS Y15, Y, Y

// STORE_PAIR writes lane 0 of Y (X its low lane) to the row at lo and lane
// 4 to the row at hi.
#define STORE_PAIR(Y, X, lo, hi) \
	VMOVSS X, lo \
	VEXTRACTF128 $1, Y, X14 \
	VMOVSS X14, hi

// KEY_STEP adds one position's products of this step to its accumulators:
// the key's four floats at addr, broadcast to both 128-bit lanes, times the
// quad's interleaved queries at (BX) (heads 0–1) and 32(BX) (heads 2–3).
#define KEY_STEP(addr, K, P, A0, A1) \
	VBROADCASTF128 addr, K \
	VMULPS (BX), K, P \
	VMULPS 32(BX), K, K \
	VADDPS P, A0, A0 \
	VADDPS K, A1, A1

// func attendScoresAVX2(scores, qi *float32, quads, steps int, keys *float32, stride, n int, scale float32)
//
// attendScoresAVX512 for 4·quads heads whose queries qi holds as
// [steps][heads][4]: each quad takes two registers (heads 0–1, heads 2–3),
// four lanes per head. Four positions run at once.
TEXT ·attendScoresAVX2(SB), NOSPLIT, $0-60
	MOVQ scores+0(FP), DI
	MOVQ qi+8(FP), SI
	MOVQ quads+16(FP), R14
	SHLQ $6, R14             // bytes of qi per step of four columns
	MOVQ keys+32(FP), R10
	MOVQ stride+40(FP), R11
	SHLQ $2, R11             // key row stride in bytes
	MOVQ n+48(FP), R12
	XORQ AX, AX              // position t

a2Pos4:
	MOVQ R12, R9
	SUBQ AX, R9
	CMPQ R9, $4
	JLT  a2Pos1
	MOVQ AX, CX
	IMULQ R11, CX
	ADDQ R10, CX             // &k_t
	// Prefetch the key rows t+4…t+7 while t…t+3 are scored.
	LEAQ (CX)(R11*4), R9
	MOVQ $4, BX
a2PfRow:
	MOVQ steps+24(FP), R13
	SHLQ $4, R13             // bytes of a key row
a2PfLine:
	SUBQ $64, R13
	JL   a2PfNext
	PREFETCHT0 (R9)(R13*1)
	JMP  a2PfLine
a2PfNext:
	ADDQ R11, R9
	DECQ BX
	JNZ  a2PfRow
	XORQ DX, DX              // quad
a2Quad4:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ DX, BX
	SHLQ $6, BX
	ADDQ SI, BX              // &qi[0][4·quad]
	MOVQ CX, R15             // &k_t, then k_t+1 at +R11
	LEAQ (CX)(R11*2), R8     // &k_t+2, then k_t+3 at +R11
	MOVQ steps+24(FP), R13
a2Step4:
	KEY_STEP((R15), Y8, Y9, Y0, Y1)
	KEY_STEP((R15)(R11*1), Y10, Y11, Y2, Y3)
	KEY_STEP((R8), Y12, Y13, Y4, Y5)
	KEY_STEP((R8)(R11*1), Y14, Y15, Y6, Y7)
	ADDQ $16, R15
	ADDQ $16, R8
	ADDQ R14, BX
	DECQ R13
	JNZ  a2Step4
	VBROADCASTSS scale+56(FP), Y15
	HSUM4Y(Y0, Y14)
	HSUM4Y(Y1, Y14)
	HSUM4Y(Y2, Y14)
	HSUM4Y(Y3, Y14)
	HSUM4Y(Y4, Y14)
	HSUM4Y(Y5, Y14)
	HSUM4Y(Y6, Y14)
	HSUM4Y(Y7, Y14)
	// scores[(4·quad+r)·n + t+k] for r = 0…3: rows n floats (R12·4 bytes) apart
	MOVQ DX, R9
	IMULQ R12, R9
	SHLQ $2, R9
	ADDQ AX, R9
	LEAQ (DI)(R9*4), R9
	LEAQ (R9)(R12*8), R13     // rows 2 and 3 of the quad
	STORE_PAIR(Y0, X0, 0(R9), 0(R9)(R12*4))
	STORE_PAIR(Y1, X1, 0(R13), 0(R13)(R12*4))
	STORE_PAIR(Y2, X2, 4(R9), 4(R9)(R12*4))
	STORE_PAIR(Y3, X3, 4(R13), 4(R13)(R12*4))
	STORE_PAIR(Y4, X4, 8(R9), 8(R9)(R12*4))
	STORE_PAIR(Y5, X5, 8(R13), 8(R13)(R12*4))
	STORE_PAIR(Y6, X6, 12(R9), 12(R9)(R12*4))
	STORE_PAIR(Y7, X7, 12(R13), 12(R13)(R12*4))
	INCQ DX
	CMPQ DX, quads+16(FP)
	JLT  a2Quad4
	ADDQ $4, AX
	JMP  a2Pos4

a2Pos1:
	CMPQ AX, R12
	JGE  a2Done
	MOVQ AX, CX
	IMULQ R11, CX
	ADDQ R10, CX
	XORQ DX, DX
a2Quad1:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ DX, BX
	SHLQ $6, BX
	ADDQ SI, BX
	MOVQ CX, R15
	MOVQ steps+24(FP), R13
a2Step1:
	KEY_STEP((R15), Y8, Y9, Y0, Y1)
	ADDQ $16, R15
	ADDQ R14, BX
	DECQ R13
	JNZ  a2Step1
	VBROADCASTSS scale+56(FP), Y15
	HSUM4Y(Y0, Y14)
	HSUM4Y(Y1, Y14)
	MOVQ DX, R9
	IMULQ R12, R9
	SHLQ $2, R9
	ADDQ AX, R9
	LEAQ (DI)(R9*4), R9
	LEAQ (R9)(R12*8), R13
	STORE_PAIR(Y0, X0, 0(R9), 0(R9)(R12*4))
	STORE_PAIR(Y1, X1, 0(R13), 0(R13)(R12*4))
	INCQ DX
	CMPQ DX, quads+16(FP)
	JLT  a2Quad1
	INCQ AX
	JMP  a2Pos1

a2Done:
	VZEROUPPER
	RET

// AV2_HEAD adds w (broadcast from addr) times the value columns Y8–Y11 to
// one head's accumulators A0–A3.
#define AV2_HEAD(addr, A0, A1, A2, A3) \
	VBROADCASTSS addr, Y12 \
	VMULPS Y8, Y12, Y13 \
	VMULPS Y9, Y12, Y14 \
	VMULPS Y10, Y12, Y15 \
	VMULPS Y11, Y12, Y12 \
	VADDPS Y13, A0, A0 \
	VADDPS Y14, A1, A1 \
	VADDPS Y15, A2, A2 \
	VADDPS Y12, A3, A3

#define ROW2_LOAD(addr, A0, A1, A2, A3) \
	VMOVUPS 0 addr, A0 \
	VMOVUPS 32 addr, A1 \
	VMOVUPS 64 addr, A2 \
	VMOVUPS 96 addr, A3

#define ROW2_STORE(addr, A0, A1, A2, A3) \
	VMOVUPS A0, 0 addr \
	VMOVUPS A1, 32 addr \
	VMOVUPS A2, 64 addr \
	VMOVUPS A3, 96 addr

// func attendValuesAVX2(o, w *float32, pairs, blocks, wStride int, values *float32, stride, tile int)
//
// One tile of AttendValues: for every two heads and every block of 32
// output columns, the block (8 registers) is loaded, takes the tile's
// positions in order, and is stored back.
TEXT ·attendValuesAVX2(SB), NOSPLIT, $0-64
	MOVQ o+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ wStride+32(FP), R10
	SHLQ $2, R10             // weight row stride in bytes
	MOVQ values+40(FP), R11
	MOVQ stride+48(FP), R12
	SHLQ $2, R12             // value row stride in bytes
	MOVQ blocks+24(FP), R13
	SHLQ $7, R13             // output row stride in bytes (d = 32·blocks)
	XORQ R8, R8              // pair
v2Pair:
	XORQ R9, R9              // column block
v2Block:
	// AX = &o[2·pair][32·block]
	MOVQ R8, AX
	IMULQ R13, AX
	SHLQ $1, AX
	ADDQ DI, AX
	MOVQ R9, R14
	SHLQ $7, R14
	ADDQ R14, AX
	ROW2_LOAD((AX), Y0, Y1, Y2, Y3)
	ROW2_LOAD((AX)(R13*1), Y4, Y5, Y6, Y7)
	// DX = &w[2·pair][0]; CX = &values[0][32·block]
	MOVQ R8, DX
	IMULQ R10, DX
	SHLQ $1, DX
	ADDQ SI, DX
	MOVQ R9, CX
	SHLQ $7, CX
	ADDQ R11, CX
	MOVQ tile+56(FP), BX
v2Pos:
	PREFETCHT0 0(CX)(R12*8)
	PREFETCHT0 64(CX)(R12*8)
	VMOVUPS 0(CX), Y8
	VMOVUPS 32(CX), Y9
	VMOVUPS 64(CX), Y10
	VMOVUPS 96(CX), Y11
	AV2_HEAD((DX), Y0, Y1, Y2, Y3)
	AV2_HEAD((DX)(R10*1), Y4, Y5, Y6, Y7)
	ADDQ R12, CX
	ADDQ $4, DX
	DECQ BX
	JNZ  v2Pos
	ROW2_STORE((AX), Y0, Y1, Y2, Y3)
	ROW2_STORE((AX)(R13*1), Y4, Y5, Y6, Y7)
	INCQ R9
	CMPQ R9, blocks+24(FP)
	JLT  v2Block
	INCQ R8
	CMPQ R8, pairs+16(FP)
	JLT  v2Pair
	VZEROUPPER
	RET

// func widenQ8AVX2(dst *float32, src *int8, srcStride int, scales *float32, scaleStride, rows, d, group int)
//
// widenQ8AVX512 eight values at a time, for d and group multiples of 8.
TEXT ·widenQ8AVX2(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ srcStride+16(FP), R8
	MOVQ scales+24(FP), R9
	MOVQ scaleStride+32(FP), R10
	SHLQ $2, R10             // scale row stride in bytes
	MOVQ rows+40(FP), R11
	MOVQ d+48(FP), R12
	MOVQ group+56(FP), R13
w2Row:
	MOVQ SI, AX              // this row's values
	MOVQ R9, BX              // this row's scales
	XORQ CX, CX              // column
w2Group:
	VBROADCASTSS (BX), Y1
	MOVQ R13, DX
w2Cols:
	VPMOVSXBD (AX), Y0
	VCVTDQ2PS Y0, Y0
	VMULPS Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $8, AX
	ADDQ $32, DI
	SUBQ $8, DX
	JNZ  w2Cols
	ADDQ $4, BX
	ADDQ R13, CX
	CMPQ CX, R12
	JLT  w2Group
	ADDQ R8, SI
	ADDQ R10, R9
	DECQ R11
	JNZ  w2Row
	VZEROUPPER
	RET

// func widenBF16AVX2(dst *float32, src *uint16, srcStride, rows, d int)
//
// widenBF16AVX512 eight values at a time, for d a multiple of 8.
TEXT ·widenBF16AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ srcStride+16(FP), R8
	SHLQ $1, R8              // row stride in bytes
	MOVQ rows+24(FP), R11
	MOVQ d+32(FP), R12
b2Row:
	MOVQ SI, AX
	MOVQ R12, DX
b2Cols:
	VPMOVZXWD (AX), Y0
	VPSLLD $16, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, AX
	ADDQ $32, DI
	SUBQ $8, DX
	JNZ  b2Cols
	ADDQ R8, SI
	DECQ R11
	JNZ  b2Row
	VZEROUPPER
	RET

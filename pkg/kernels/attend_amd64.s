//go:build !purego

#include "textflag.h"

// HSUM4 folds each 128-bit lane of Z (one head's four dot lanes) into its
// first float as (l0+l1)+(l2+l3), DotRows' order, and scales it by Z31.
#define HSUM4(Z, T) \
	VSHUFPS $0xB1, Z, Z, T \
	VADDPS T, Z, Z \
	VSHUFPS $0x4E, Z, Z, T \
	VADDPS T, Z, Z \
	VMULPS Z31, Z, Z

// STORE_HEADS writes lane 4r of Z (X its low lane) to row r of the quad's
// scores, off bytes into the row: rows 0 and 1 at R9 and R9+R12·4, rows 2
// and 3 at R13 and R13+R12·4.
#define STORE_HEADS(Z, X, off) \
	VMOVSS X, off(R9) \
	VEXTRACTF32X4 $1, Z, X9 \
	VMOVSS X9, off(R9)(R12*4) \
	VEXTRACTF32X4 $2, Z, X9 \
	VMOVSS X9, off(R13) \
	VEXTRACTF32X4 $3, Z, X9 \
	VMOVSS X9, off(R13)(R12*4)

// func attendScoresAVX512(scores, qi *float32, quads, steps int, keys *float32, stride, n int, scale float32)
//
// AttendScores for 4·quads heads whose queries qi holds as [steps][heads][4]:
// lane 4r+l of a register sums head 4·quad+r's products of the columns ≡ l
// (mod 4). Four positions run at once (four independent add chains); each
// reads its key row as 16-byte pieces broadcast to the four heads.
TEXT ·attendScoresAVX512(SB), NOSPLIT, $0-60
	MOVQ scores+0(FP), DI
	MOVQ qi+8(FP), SI
	MOVQ quads+16(FP), R14
	SHLQ $6, R14             // bytes of qi per step of four columns
	MOVQ keys+32(FP), R10
	MOVQ stride+40(FP), R11
	SHLQ $2, R11             // key row stride in bytes
	MOVQ n+48(FP), R12
	VBROADCASTSS scale+56(FP), Z31
	XORQ AX, AX              // position t

asPos4:
	MOVQ R12, R9
	SUBQ AX, R9
	CMPQ R9, $4
	JLT  asPos1
	MOVQ AX, CX
	IMULQ R11, CX
	ADDQ R10, CX             // &k_t
	// Prefetch the key rows t+4…t+7 while t…t+3 are scored: rows sit a KV
	// row apart, too far for the hardware prefetcher to follow.
	LEAQ (CX)(R11*4), R9
	MOVQ $4, BX
asPfRow:
	MOVQ steps+24(FP), R13
	SHLQ $4, R13             // bytes of a key row
asPfLine:
	SUBQ $64, R13
	JL   asPfNext
	PREFETCHT0 (R9)(R13*1)
	JMP  asPfLine
asPfNext:
	ADDQ R11, R9
	DECQ BX
	JNZ  asPfRow
	XORQ DX, DX              // quad
asQuad4:
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	MOVQ DX, BX
	SHLQ $6, BX
	ADDQ SI, BX              // &qi[0][4·quad]
	MOVQ CX, R15             // &k_t, then k_t+1 at +R11
	LEAQ (CX)(R11*2), R8     // &k_t+2, then k_t+3 at +R11
	MOVQ steps+24(FP), R13
asStep4:
	VMOVUPS (BX), Z8
	VBROADCASTF32X4 (R15), Z4
	VBROADCASTF32X4 (R15)(R11*1), Z5
	VBROADCASTF32X4 (R8), Z6
	VBROADCASTF32X4 (R8)(R11*1), Z7
	VMULPS Z8, Z4, Z4
	VMULPS Z8, Z5, Z5
	VMULPS Z8, Z6, Z6
	VMULPS Z8, Z7, Z7
	VADDPS Z4, Z0, Z0
	VADDPS Z5, Z1, Z1
	VADDPS Z6, Z2, Z2
	VADDPS Z7, Z3, Z3
	ADDQ $16, R15
	ADDQ $16, R8
	ADDQ R14, BX
	DECQ R13
	JNZ  asStep4
	HSUM4(Z0, Z9)
	HSUM4(Z1, Z9)
	HSUM4(Z2, Z9)
	HSUM4(Z3, Z9)
	// scores[(4·quad+r)·n + t+k] for r = 0…3: rows n floats (R12·4 bytes) apart
	MOVQ DX, R9
	IMULQ R12, R9
	SHLQ $2, R9
	ADDQ AX, R9
	LEAQ (DI)(R9*4), R9
	LEAQ (R9)(R12*8), R13     // rows 2 and 3 of the quad
	STORE_HEADS(Z0, X0, 0)
	STORE_HEADS(Z1, X1, 4)
	STORE_HEADS(Z2, X2, 8)
	STORE_HEADS(Z3, X3, 12)
	INCQ DX
	CMPQ DX, quads+16(FP)
	JLT  asQuad4
	ADDQ $4, AX
	JMP  asPos4

asPos1:
	CMPQ AX, R12
	JGE  asDone
	MOVQ AX, CX
	IMULQ R11, CX
	ADDQ R10, CX
	XORQ DX, DX
asQuad1:
	VXORPS Z0, Z0, Z0
	MOVQ DX, BX
	SHLQ $6, BX
	ADDQ SI, BX
	MOVQ CX, R15
	MOVQ steps+24(FP), R13
asStep1:
	VBROADCASTF32X4 (R15), Z4
	VMULPS (BX), Z4, Z4
	VADDPS Z4, Z0, Z0
	ADDQ $16, R15
	ADDQ R14, BX
	DECQ R13
	JNZ  asStep1
	HSUM4(Z0, Z9)
	MOVQ DX, R9
	IMULQ R12, R9
	SHLQ $2, R9
	ADDQ AX, R9
	LEAQ (DI)(R9*4), R9
	LEAQ (R9)(R12*8), R13
	STORE_HEADS(Z0, X0, 0)
	INCQ DX
	CMPQ DX, quads+16(FP)
	JLT  asQuad1
	INCQ AX
	JMP  asPos1

asDone:
	VZEROUPPER
	RET

// AV_HEAD adds w (broadcast from addr) times the value columns Z16–Z19 to
// one head's accumulators A0–A3.
#define AV_HEAD(addr, A0, A1, A2, A3) \
	VBROADCASTSS addr, Z20 \
	VMULPS Z16, Z20, Z21 \
	VMULPS Z17, Z20, Z22 \
	VMULPS Z18, Z20, Z23 \
	VMULPS Z19, Z20, Z24 \
	VADDPS Z21, A0, A0 \
	VADDPS Z22, A1, A1 \
	VADDPS Z23, A2, A2 \
	VADDPS Z24, A3, A3

// ROW_LOAD and ROW_STORE move one head's 64-column block (four registers)
// between memory at addr and A0–A3.
#define ROW_LOAD(addr, A0, A1, A2, A3) \
	VMOVUPS 0 addr, A0 \
	VMOVUPS 64 addr, A1 \
	VMOVUPS 128 addr, A2 \
	VMOVUPS 192 addr, A3

#define ROW_STORE(addr, A0, A1, A2, A3) \
	VMOVUPS A0, 0 addr \
	VMOVUPS A1, 64 addr \
	VMOVUPS A2, 128 addr \
	VMOVUPS A3, 192 addr

// func attendValuesAVX512(o, w *float32, quads, blocks, wStride int, values *float32, stride, tile int)
//
// One tile of AttendValues: for every four heads and every block of 64
// output columns, the block (16 registers) is loaded, takes the tile's
// positions in order, and is stored back.
TEXT ·attendValuesAVX512(SB), NOSPLIT, $0-64
	MOVQ o+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ wStride+32(FP), R10
	SHLQ $2, R10             // weight row stride in bytes
	MOVQ values+40(FP), R11
	MOVQ stride+48(FP), R12
	SHLQ $2, R12             // value row stride in bytes
	MOVQ blocks+24(FP), R13
	SHLQ $8, R13             // output row stride in bytes (d = 64·blocks)
	XORQ R8, R8              // quad
avQuad:
	XORQ R9, R9              // column block
avBlock:
	// AX = &o[4·quad][64·block]
	MOVQ R8, AX
	IMULQ R13, AX
	SHLQ $2, AX
	ADDQ DI, AX
	MOVQ R9, R14
	SHLQ $8, R14
	ADDQ R14, AX
	LEAQ (AX)(R13*2), R14    // row 2; row 3 at +R13
	ROW_LOAD((AX), Z0, Z1, Z2, Z3)
	ROW_LOAD((AX)(R13*1), Z4, Z5, Z6, Z7)
	ROW_LOAD((R14), Z8, Z9, Z10, Z11)
	ROW_LOAD((R14)(R13*1), Z12, Z13, Z14, Z15)
	// DX = &w[4·quad][0], R15 = &w[4·quad+2][0]; CX = &values[0][64·block]
	MOVQ R8, DX
	IMULQ R10, DX
	SHLQ $2, DX
	ADDQ SI, DX
	LEAQ (DX)(R10*2), R15
	MOVQ R9, CX
	SHLQ $8, CX
	ADDQ R11, CX
	MOVQ tile+56(FP), BX
avPos:
	PREFETCHT0 0(CX)(R12*8)
	PREFETCHT0 64(CX)(R12*8)
	PREFETCHT0 128(CX)(R12*8)
	PREFETCHT0 192(CX)(R12*8)
	VMOVUPS 0(CX), Z16
	VMOVUPS 64(CX), Z17
	VMOVUPS 128(CX), Z18
	VMOVUPS 192(CX), Z19
	AV_HEAD((DX), Z0, Z1, Z2, Z3)
	AV_HEAD((DX)(R10*1), Z4, Z5, Z6, Z7)
	AV_HEAD((R15), Z8, Z9, Z10, Z11)
	AV_HEAD((R15)(R10*1), Z12, Z13, Z14, Z15)
	ADDQ R12, CX
	ADDQ $4, DX
	ADDQ $4, R15
	DECQ BX
	JNZ  avPos
	ROW_STORE((AX), Z0, Z1, Z2, Z3)
	ROW_STORE((AX)(R13*1), Z4, Z5, Z6, Z7)
	ROW_STORE((R14), Z8, Z9, Z10, Z11)
	ROW_STORE((R14)(R13*1), Z12, Z13, Z14, Z15)
	INCQ R9
	CMPQ R9, blocks+24(FP)
	JLT  avBlock
	INCQ R8
	CMPQ R8, quads+16(FP)
	JLT  avQuad
	VZEROUPPER
	RET

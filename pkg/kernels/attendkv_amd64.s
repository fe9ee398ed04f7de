//go:build !purego

#include "textflag.h"

// func widenQ8AVX512(dst *float32, src *int8, srcStride int, scales *float32, scaleStride, rows, d, group int)
//
// dst[r·d+i] = float32(src[r·srcStride+i]) · scales[r·scaleStride+i/group]
// for d and group multiples of 16: sign-extend 16 bytes, convert, one
// multiply (the reference's rounding), store.
TEXT ·widenQ8AVX512(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ srcStride+16(FP), R8
	MOVQ scales+24(FP), R9
	MOVQ scaleStride+32(FP), R10
	SHLQ $2, R10             // scale row stride in bytes
	MOVQ rows+40(FP), R11
	MOVQ d+48(FP), R12
	MOVQ group+56(FP), R13
wqRow:
	MOVQ SI, AX              // this row's values
	MOVQ R9, BX              // this row's scales
	XORQ CX, CX              // column
wqGroup:
	VBROADCASTSS (BX), Z1
	MOVQ R13, DX
wqCols:
	VPMOVSXBD (AX), Z0
	VCVTDQ2PS Z0, Z0
	VMULPS Z1, Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $16, AX
	ADDQ $64, DI
	SUBQ $16, DX
	JNZ  wqCols
	ADDQ $4, BX
	ADDQ R13, CX
	CMPQ CX, R12
	JLT  wqGroup
	ADDQ R8, SI
	ADDQ R10, R9
	DECQ R11
	JNZ  wqRow
	VZEROUPPER
	RET

// func widenBF16AVX512(dst *float32, src *uint16, srcStride, rows, d int)
//
// dst[r·d+i] = float32 with the bits src[r·srcStride+i] << 16, for d a
// multiple of 16.
TEXT ·widenBF16AVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ srcStride+16(FP), R8
	SHLQ $1, R8              // row stride in bytes
	MOVQ rows+24(FP), R11
	MOVQ d+32(FP), R12
wbRow:
	MOVQ SI, AX
	MOVQ R12, DX
wbCols:
	VPMOVZXWD (AX), Z0
	VPSLLD $16, Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $32, AX
	ADDQ $64, DI
	SUBQ $16, DX
	JNZ  wbCols
	ADDQ R8, SI
	DECQ R11
	JNZ  wbRow
	VZEROUPPER
	RET

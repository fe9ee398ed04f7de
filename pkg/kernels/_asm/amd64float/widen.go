package main

import "fmt"

// widen: the KV cache's rows to float32, one register of lanes at a time.
func widen(a isa) {
	n := a.lanes
	fn("widenQ8"+a.name, "(dst *float32, src *int8, srcStride int, scales *float32, scaleStride, rows, d, group int)", 64, fmt.Sprintf(`
dst[r·d+i] = float32(src[r·srcStride+i]) · scales[r·scaleStride+i/group]
for d and group multiples of %d: sign-extend %d bytes, convert, one
multiply (the reference's rounding), store.`, n, n))
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ src+8(FP), SI")
	emit("MOVQ srcStride+16(FP), R8")
	emit("MOVQ scales+24(FP), R9")
	emit("MOVQ scaleStride+32(FP), R10")
	emit("SHLQ $2, R10             // scale row stride in bytes")
	emit("MOVQ rows+40(FP), R11")
	emit("MOVQ d+48(FP), R12")
	emit("MOVQ group+56(FP), R13")
	label("row")
	emit("MOVQ SI, AX              // this row's values")
	emit("MOVQ R9, BX              // this row's scales")
	emit("XORQ CX, CX              // column")
	label("group")
	emit("VBROADCASTSS (BX), %s", a.v(1))
	emit("MOVQ R13, DX")
	label("cols")
	emit("VPMOVSXBD (AX), %s", a.v(0))
	emit("VCVTDQ2PS %s, %s", a.v(0), a.v(0))
	emit("VMULPS %s, %s, %s", a.v(1), a.v(0), a.v(0))
	emit("VMOVUPS %s, (DI)", a.v(0))
	emit("ADDQ $%d, AX", n)
	emit("ADDQ $%d, DI", a.bytes())
	emit("SUBQ $%d, DX", n)
	emit("JNZ  cols")
	emit("ADDQ $4, BX")
	emit("ADDQ R13, CX")
	emit("CMPQ CX, R12")
	emit("JLT  group")
	emit("ADDQ R8, SI")
	emit("ADDQ R10, R9")
	emit("DECQ R11")
	emit("JNZ  row")
	emit("VZEROUPPER")
	emit("RET")

	fn("widenBF16"+a.name, "(dst *float32, src *uint16, srcStride, rows, d int)", 40, fmt.Sprintf(`
dst[r·d+i] = float32 with the bits src[r·srcStride+i] << 16, for d a
multiple of %d.`, n))
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ src+8(FP), SI")
	emit("MOVQ srcStride+16(FP), R8")
	emit("SHLQ $1, R8              // row stride in bytes")
	emit("MOVQ rows+24(FP), R11")
	emit("MOVQ d+32(FP), R12")
	label("row")
	emit("MOVQ SI, AX")
	emit("MOVQ R12, DX")
	label("cols")
	emit("VPMOVZXWD (AX), %s", a.v(0))
	emit("VPSLLD $16, %s, %s", a.v(0), a.v(0))
	emit("VMOVUPS %s, (DI)", a.v(0))
	emit("ADDQ $%d, AX", 2*n)
	emit("ADDQ $%d, DI", a.bytes())
	emit("SUBQ $%d, DX", n)
	emit("JNZ  cols")
	emit("ADDQ R8, SI")
	emit("DECQ R11")
	emit("JNZ  row")
	emit("VZEROUPPER")
	emit("RET")
}

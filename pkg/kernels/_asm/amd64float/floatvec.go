package main

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/kernels/_asm/x86"
)

// floatvec: the BF16 and float32 row dots. They are not one kernel at two
// widths (AVX2 dots one token, AVX-512 four at once), but the BF16 ones walk
// their four rows the same way (bf16Rows).
func floatvec() {
	dotBF16()
	dotBF16x4()
	dotRows4()
	axpyRows()
	dotBF16x4x4()
}

// rowBases are the four rows' pointers of the four-row kernels.
var rowBases = []string{"SI", "R9", "R10", "R11"}

// fourRows points R9–R11 at rows 1–3, DX bytes apart from SI.
func fourRows() {
	emit("LEAQ (SI)(DX*1), R9")
	emit("LEAQ (R9)(DX*1), R10")
	emit("LEAQ (R10)(DX*1), R11")
}

// bf16x8 widens the 8 bfloat16 at addr into Y register y (as float32).
func bf16x8(addr string, y int) {
	emit("VPMOVZXWD %s, Y%d", addr, y)
	emit("VPSLLD $16, Y%d, Y%d", y, y)
}

// reduce8 folds the 8 lanes of Yy into Xy's lane 0 in the reference order
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), Yt scratch.
func reduce8(y, t int) { x86.Fold8(emit, "ADD", y, t) }

// reduce4 folds Xx's 4 lanes into lane 0 as (l0+l1)+(l2+l3), Xt scratch.
func reduce4(x, t int) {
	emit("VMOVSHDUP X%d, X%d", x, t)
	emit("VADDPS X%d, X%d, X%d", t, x, x)
	emit("VMOVHLPS X%d, X%d, X%d", x, x, t)
	emit("VADDSS X%d, X%d, X%d", t, x, x)
}

// storeFourDots reduces the four rows' lane sums in X0–X3 (or Y0–Y3) with
// reduce, scratch from register scratch on, stores them to dst[0..3] at R8
// and returns.
func storeFourDots(reduce func(x, t int), scratch int) {
	for r := range 4 {
		reduce(r, scratch+r)
	}
	for r := range 4 {
		emit("VMOVSS X%d, %d(R8)", r, 4*r)
	}
	emit("VZEROUPPER")
	emit("RET")
}

func dotBF16() {
	fn("dotBF16AVX2", "(w *byte, x *float32, n int) float32", 28, `
Lane l accumulates w[i]·x[i] for i ≡ l (mod 8), in element order.`)
	emit("MOVQ w+0(FP), SI")
	emit("MOVQ x+8(FP), DI")
	emit("MOVQ n+16(FP), CX")
	emit("VXORPS Y0, Y0, Y0")
	label("loop")
	bf16x8("(SI)", 1)
	emit("VMULPS (DI), Y1, Y1")
	emit("VADDPS Y1, Y0, Y0")
	emit("ADDQ $16, SI")
	emit("ADDQ $32, DI")
	emit("SUBQ $8, CX")
	emit("JNZ  loop")
	reduce8(0, 1)
	emit("VMOVSS X0, ret+24(FP)")
	emit("VZEROUPPER")
	emit("RET")
}

// bf16RowsArgs loads the four-row BF16 kernels' arguments: dst to R8, the
// rows to SI and R9–R11 (stride DX apart), x to DI (the tokens xstride
// apart in R12 when the kernel takes several) and n to CX.
func bf16RowsArgs(tokens bool) {
	emit("MOVQ dst+0(FP), R8")
	emit("MOVQ w+8(FP), SI")
	emit("MOVQ stride+16(FP), DX")
	emit("MOVQ x+24(FP), DI")
	n := 32
	if tokens {
		emit("MOVQ xstride+32(FP), R12")
		n = 40
	}
	emit("MOVQ n+%d(FP), CX", n)
	fourRows()
}

// bf16Rows walks CX columns of the four BF16 rows at SI, R9–R11 and of x at
// DI: 32 columns a block (four steps of 8), then 8 at a time; step adds
// the 8 columns at byte offsets w (rows) and x (x). prefetch, when set,
// runs once a block.
func bf16Rows(step func(w, x int), prefetch func()) {
	label("block")
	emit("CMPQ CX, $32")
	emit("JLT  tail")
	if prefetch != nil {
		prefetch()
	}
	for s := range 4 {
		step(16*s, 32*s)
	}
	advance := func(columns int) {
		for _, row := range rowBases {
			emit("ADDQ $%d, %s", 2*columns, row)
		}
		emit("ADDQ $%d, DI", 4*columns)
		emit("SUBQ $%d, CX", columns)
	}
	advance(32)
	emit("JMP  block")
	label("tail")
	emit("TESTQ CX, CX")
	emit("JZ    done")
	step(0, 0)
	advance(8)
	emit("JMP  tail")
	label("done")
}

func dotBF16x4() {
	fn("dotBF16x4AVX2", "(dst *[4]float32, w *byte, stride int, x *float32, n int)", 40, `
dotBF16AVX2 of four rows at once (independent chains hide the add
latency). Rows are often a page long (2048 columns), and the hardware
prefetcher does not follow a stream into the next page, so while it reads
a 64-byte column block of the four rows it prefetches the same block of
the next four.`)
	bf16RowsArgs(false)
	emit("LEAQ (DX*4), R12")
	avx2.zeroFirst(4)
	// Y0–Y3 the rows' lane sums, Y4–Y7 their widened columns, Y8 x.
	bf16Rows(func(w, x int) {
		emit("VMOVUPS %d(DI), Y8", x)
		for r, row := range rowBases {
			bf16x8(fmt.Sprintf("%d(%s)", w, row), 4+r)
		}
		for r := range 4 {
			emit("VMULPS Y8, Y%d, Y%d", 4+r, 4+r)
		}
		for r := range 4 {
			emit("VADDPS Y%d, Y%d, Y%d", 4+r, r, r)
		}
	}, func() {
		for _, row := range rowBases {
			emit("PREFETCHT0 (%s)(R12*1)", row)
		}
	})
	storeFourDots(reduce8, 4)
}

func dotRows4() {
	fn("dotRows4AVX", "(dst, a *float32, n int, b *float32)", 32, `
dst[0..3] = rows 0..3 of a (n floats apart) · b: one 4-lane accumulator
per row (four independent chains), n a positive multiple of 4.`)
	emit("MOVQ dst+0(FP), R8")
	emit("MOVQ a+8(FP), SI")
	emit("MOVQ n+16(FP), CX")
	emit("MOVQ b+24(FP), DI")
	emit("MOVQ CX, DX")
	emit("SHLQ $2, DX              // row stride in bytes")
	fourRows()
	for r := range 4 {
		emit("VXORPS X%d, X%d, X%d", r, r, r)
	}
	emit("XORQ AX, AX")
	label("loop")
	emit("VMOVUPS (DI)(AX*1), X4")
	for r, row := range rowBases {
		emit("VMULPS (%s)(AX*1), X4, X%d", row, 5+r)
	}
	for r := range 4 {
		emit("VADDPS X%d, X%d, X%d", 5+r, r, r)
	}
	emit("ADDQ $16, AX")
	emit("CMPQ AX, DX")
	emit("JLT  loop")
	storeFourDots(reduce4, 5)
}

func axpyRows() {
	fn("axpyRowsAVX512", "(dst *float32, rows, stride int, alpha *float32, x *float32, n int)", 48, `
Row j of dst (stride floats apart): dst[i] += alpha[j]·x[i] for i < n, n a
positive multiple of 16.`)
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ rows+8(FP), BX")
	emit("MOVQ stride+16(FP), DX")
	emit("MOVQ alpha+24(FP), R8")
	emit("MOVQ x+32(FP), SI")
	emit("MOVQ n+40(FP), CX")
	emit("SHLQ $2, DX")
	emit("SHLQ $2, CX")
	label("row")
	emit("VBROADCASTSS (R8), Z31")
	emit("XORQ AX, AX")
	label("loop")
	emit("VMULPS (SI)(AX*1), Z31, Z0")
	emit("VADDPS (DI)(AX*1), Z0, Z0")
	emit("VMOVUPS Z0, (DI)(AX*1)")
	emit("ADDQ $64, AX")
	emit("CMPQ AX, CX")
	emit("JLT  loop")
	emit("ADDQ DX, DI")
	emit("ADDQ $4, R8")
	emit("DECQ BX")
	emit("JNZ  row")
	emit("VZEROUPPER")
	emit("RET")
}

func dotBF16x4x4() {
	fn("dotBF16x4x4AVX512", "(dst *[16]float32, w *byte, stride int, x *float32, xstride int, n int)", 48, `
dotBF16x4AVX2 for four tokens at once: dst[4t+r] is row r (stride bytes
apart from w) with token t's x (xstride bytes apart), each lane chain the
reference's. Two tokens share a 16-lane register, so each widened weight
vector serves four tokens and eight independent chains hide the add
latency that bounds the one-token kernel. n is a positive multiple of 8.`)
	bf16RowsArgs(true)
	emit("LEAQ (R12)(R12*2), R13")
	avx512.zeroFirst(8)
	// Z(2r+p) holds row r against token 2p in its low half and token 2p+1
	// in its high half; Z8–Z11 the rows' columns in both halves, Z12 and
	// Z13 tokens 0|1 and 2|3, Z16–Z23 the products.
	bf16Rows(func(w, x int) {
		emit("VMOVUPS %d(DI), Y12", x)
		emit("VINSERTF32X8 $1, %d(DI)(R12*1), Z12, Z12", x)
		emit("VMOVUPS %d(DI)(R12*2), Y13", x)
		emit("VINSERTF32X8 $1, %d(DI)(R13*1), Z13, Z13", x)
		for r, row := range rowBases {
			bf16x8(fmt.Sprintf("%d(%s)", w, row), 8+r)
			emit("VINSERTF32X8 $1, Y%d, Z%d, Z%d", 8+r, 8+r, 8+r)
		}
		for r := range 4 {
			emit("VMULPS Z12, Z%d, Z%d", 8+r, 16+2*r)
			emit("VMULPS Z13, Z%d, Z%d", 8+r, 17+2*r)
		}
		for i := range 8 {
			emit("VADDPS Z%d, Z%d, Z%d", 16+i, i, i)
		}
	}, nil)
	// dst[4t+r], bytes 16t+4r: accumulator 2r+p gives tokens 2p (low half)
	// and 2p+1 (high half).
	for i := range 8 {
		r, p := i/2, i%2
		emit("VEXTRACTF32X8 $1, Z%d, Y14", i)
		reduce8(i, 15)
		emit("VMOVSS X%d, %d(R8)", i, 32*p+4*r)
		reduce8(14, 15)
		emit("VMOVSS X14, %d(R8)", 32*p+16+4*r)
	}
	emit("VZEROUPPER")
	emit("RET")
}

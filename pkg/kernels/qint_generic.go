package kernels

import "encoding/binary"

// The integer path for Q4 and Q8 (MatVecQ, MatMulQ and the Fast entry
// points). With the activation quantized per group g (dx_g, xq, Σx_g; see
// QActivation), row r is
//
//	y_r = Σ_g ( s_rg·dx_g·d_rg + b_rg·Σx_g ),  d_rg = Σ_i q_i·xq_i
//
// The integer dot d is exact in int32 (|d| ≤ 64·255·127 < 2²⁴, so float32(d)
// is exact too) and the float part has one fixed order, which every
// implementation (this reference, AVX-512, AVX2, NEON) reproduces bit for bit:
//
//  1. Per group: m = float32(s·dx); t = float32(m·float32(d));
//     u = float32(b·Σx); v = float32(t + u). No fused multiply-adds.
//  2. Group g adds v to lane g mod 16 of a 16-lane accumulator starting at
//     +0, in group order. (SIMD kernels add exact +0 in the lanes of a
//     partial last block; an accumulator that starts at +0 is never -0, so
//     adding +0 changes nothing.)
//  3. The 16 lanes reduce by halving: a[i] += a[i+8] (i < 8), then
//     a[i] += a[i+4], a[i] += a[i+2], y = a[0] + a[1]: the order a 512-bit
//     register folds in.
//
// Every product of one row is computed by the same code whatever the thread
// count or entry point, so results are bitwise identical across them.

// qRowsGeneric computes rows [lo, hi) of m against token tok of qa into
// dst[lo:hi]. It is the reference every SIMD kernel is tested against.
func qRowsGeneric(dst []float32, m *Matrix, qa *QActivation, tok, lo, hi int) {
	groups := m.Cols / GroupSize
	xq := qa.tokenQ8(tok)
	ds := qa.tokenDS(tok)
	rowBytes := m.Cols / 2
	if m.Enc == Q8 {
		rowBytes = m.Cols
	}
	for r := lo; r < hi; r++ {
		w := m.Data[r*rowBytes : (r+1)*rowBytes]
		scales, biases := rowParams(m, r)
		var acc [blockGroups]float32
		for g := range groups {
			var d int32
			if m.Enc == Q4 {
				d = dotQ4Int(w[g*GroupSize/2:(g+1)*GroupSize/2], xq[g*GroupSize:(g+1)*GroupSize])
			} else {
				d = dotQ8Int(w[g*GroupSize:(g+1)*GroupSize], xq[g*GroupSize:(g+1)*GroupSize])
			}
			s := bf16ToF32(binary.LittleEndian.Uint16(scales[2*g:]))
			b := bf16ToF32(binary.LittleEndian.Uint16(biases[2*g:]))
			mul := float32(s * ds[dsIndex(g)])
			t := float32(mul * float32(d))
			u := float32(b * ds[dsIndex(g)+blockGroups])
			acc[g%blockGroups] = float32(acc[g%blockGroups] + float32(t+u))
		}
		dst[r] = reduce16(&acc)
	}
}

// reduce16 folds 16 lanes by halving (step 3 above).
func reduce16(a *[blockGroups]float32) float32 {
	var h [8]float32
	for i := range 8 {
		h[i] = a[i] + a[i+8]
	}
	for i := range 4 {
		h[i] = h[i] + h[i+4]
	}
	for i := range 2 {
		h[i] = h[i] + h[i+2]
	}
	return h[0] + h[1]
}

// dotQ4Int is Σ q·xq over one Q4 group: 32 bytes, element 2k in the low
// nibble of byte k and 2k+1 in the high one; xq in element order.
func dotQ4Int(w []byte, xq []int8) int32 {
	w, xq = w[:GroupSize/2], xq[:GroupSize]
	var even, odd int32
	for k, b := range w {
		even += int32(b&15) * int32(xq[2*k])
		odd += int32(b>>4) * int32(xq[2*k+1])
	}
	return even + odd
}

// dotQ8Int is Σ q·xq over one Q8 group of 64 bytes.
func dotQ8Int(w []byte, xq []int8) int32 {
	w, xq = w[:GroupSize], xq[:GroupSize]
	var d int32
	for i, b := range w {
		d += int32(b) * int32(xq[i])
	}
	return d
}

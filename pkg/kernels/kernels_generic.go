package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Summation order of the reference kernels. It is fixed so that a product
// is a pure function of (row bytes, x): MatVec, MatMul and every Pool
// thread count give bitwise identical results. Every product and every sum
// is rounded to float32 on its own (explicit conversions forbid FMA fusion,
// so GOAMD64 levels agree too).
//
//   - 8-lane dot: element i of a run goes to lane i mod 8, each lane adding
//     its products in element order; the lanes then reduce as
//     ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), the order an 8-wide vector
//     register reduces in.
//   - F32, BF16, F16: one 8-lane dot over the whole row of widened weights;
//     the Cols mod 8 tail elements go to lanes 0… before the reduction.
//   - Q4, Q8: per group g of 64, qx_g = 8-lane dot of the codes (as float32)
//     with x, and sx_g = 8-lane sum of x (computed once per x, shared by all
//     rows). The row is y = Σ_g (s_g·qx_g + b_g·sx_g), each group's term
//     rounded as float32(s·qx) + float32(b·sx) and added to y in group order.

// MatVec sets dst[r] = Σ_c W[r,c]·x[c] for every row of m. m must have passed
// Validate; len(dst) must be m.Rows and len(x) m.Cols.
func MatVec(dst []float32, m *Matrix, x []float32) {
	checkShapes("MatVec", dst, m, x, 1)
	var stack [stackGroups]float32
	sumX := groupSums(stack[:0], m, x, 1)
	matMulRows(dst, m, x, 1, sumX, 0, m.Rows)
}

// MatMul multiplies m by n activation rows: x is n×Cols row-major and dst
// n×Rows, dst[j·Rows+r] = Σ_c W[r,c]·x[j·Cols+c]. Each output row is bitwise
// what MatVec gives for that row of x, so a batched prefill reproduces
// token-by-token decode exactly.
func MatMul(dst []float32, m *Matrix, x []float32, n int) {
	checkShapes("MatMul", dst, m, x, n)
	var stack [stackGroups]float32
	sumX := groupSums(stack[:0], m, x, n)
	matMulRows(dst, m, x, n, sumX, 0, m.Rows)
}

// stackGroups sizes the on-stack Σx buffer: 512 groups covers a 32768-wide
// input, beyond any hidden or intermediate size we run; wider inputs (or
// batches) allocate.
const stackGroups = 512

func checkShapes(fn string, dst []float32, m *Matrix, x []float32, n int) {
	if n < 0 || len(x) != n*m.Cols || len(dst) != n*m.Rows {
		panic(fmt.Sprintf("kernels.%s: %v matrix %d×%d with %d input rows needs len(x) = %d and len(dst) = %d, got %d and %d",
			fn, m.Enc, m.Rows, m.Cols, n, n*m.Cols, n*m.Rows, len(x), len(dst)))
	}
}

// groupSums returns Σx per group for each of the n rows of x (nil for float
// encodings), appending to buf when it has room.
func groupSums(buf []float32, m *Matrix, x []float32, n int) []float32 {
	if !m.Enc.quantized() {
		return nil
	}
	total := n * m.Cols / GroupSize
	if cap(buf) < total {
		buf = make([]float32, total)
	}
	buf = buf[:total]
	for g := range buf {
		buf[g] = sum8(x[g*GroupSize : (g+1)*GroupSize])
	}
	return buf
}

// matMulRows computes rows [lo, hi) of m against each of the n rows of x.
// It is the one place a dot product is produced, for every entry point.
func matMulRows(dst []float32, m *Matrix, x []float32, n int, sumX []float32, lo, hi int) {
	if m.Enc == BF16 && bf16RowsAsm(dst, m, x, n, lo, hi) {
		return
	}
	groups := m.Cols / GroupSize
	for r := lo; r < hi; r++ {
		for j := range n {
			xj := x[j*m.Cols : (j+1)*m.Cols]
			var sj []float32
			if sumX != nil {
				sj = sumX[j*groups : (j+1)*groups]
			}
			dst[j*m.Rows+r] = rowDot(m, r, xj, sj)
		}
	}
}

func rowDot(m *Matrix, r int, x, sumX []float32) float32 {
	c := m.Cols
	switch m.Enc {
	case F32:
		return dotF32(m.Data[r*c*4:(r+1)*c*4], x)
	case BF16:
		return dotBF16(m.Data[r*c*2:(r+1)*c*2], x)
	case F16:
		return dotF16(m.Data[r*c*2:(r+1)*c*2], x)
	case Q4:
		s, b := rowParams(m, r)
		return dotQ4(m.Data[r*c/2:(r+1)*c/2], s, b, x, sumX)
	case Q8:
		s, b := rowParams(m, r)
		return dotQ8(m.Data[r*c:(r+1)*c], s, b, x, sumX)
	}
	panic(fmt.Sprintf("kernels: unknown encoding %v", m.Enc))
}

func rowParams(m *Matrix, r int) (scales, biases []byte) {
	n := m.Cols / GroupSize * 2
	return m.Scales[r*n : (r+1)*n], m.Biases[r*n : (r+1)*n]
}

func reduce8(l0, l1, l2, l3, l4, l5, l6, l7 float32) float32 {
	return ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
}

// sum8 is the 8-lane sum of x (len a multiple of 8).
func sum8(x []float32) float32 {
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	for i := 0; i+8 <= len(x); i += 8 {
		v := x[i : i+8 : i+8]
		l0 += v[0]
		l1 += v[1]
		l2 += v[2]
		l3 += v[3]
		l4 += v[4]
		l5 += v[5]
		l6 += v[6]
		l7 += v[7]
	}
	return reduce8(l0, l1, l2, l3, l4, l5, l6, l7)
}

// The float dots are spelled out per encoding (a shared generic taking a
// decode function costs an indirect call per element). All three follow the
// 8-lane order above; the Cols mod 8 tail goes through dotTail.

func dotF32(w []byte, x []float32) float32 {
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	n := len(x) &^ 7
	for i := 0; i < n; i += 8 {
		b := w[4*i : 4*i+32 : 4*i+32]
		v := x[i : i+8 : i+8]
		l0 += float32(math.Float32frombits(binary.LittleEndian.Uint32(b[0:])) * v[0])
		l1 += float32(math.Float32frombits(binary.LittleEndian.Uint32(b[4:])) * v[1])
		l2 += float32(math.Float32frombits(binary.LittleEndian.Uint32(b[8:])) * v[2])
		l3 += float32(math.Float32frombits(binary.LittleEndian.Uint32(b[12:])) * v[3])
		l4 += float32(math.Float32frombits(binary.LittleEndian.Uint32(b[16:])) * v[4])
		l5 += float32(math.Float32frombits(binary.LittleEndian.Uint32(b[20:])) * v[5])
		l6 += float32(math.Float32frombits(binary.LittleEndian.Uint32(b[24:])) * v[6])
		l7 += float32(math.Float32frombits(binary.LittleEndian.Uint32(b[28:])) * v[7])
	}
	return dotTail([8]float32{l0, l1, l2, l3, l4, l5, l6, l7}, w, x, n, f32At)
}

func dotBF16(w []byte, x []float32) float32 {
	if y, ok := dotBF16Asm(w, x); ok {
		return y
	}
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	n := len(x) &^ 7
	for i := 0; i < n; i += 8 {
		b := w[2*i : 2*i+16 : 2*i+16]
		v := x[i : i+8 : i+8]
		l0 += float32(bf16ToF32(binary.LittleEndian.Uint16(b[0:])) * v[0])
		l1 += float32(bf16ToF32(binary.LittleEndian.Uint16(b[2:])) * v[1])
		l2 += float32(bf16ToF32(binary.LittleEndian.Uint16(b[4:])) * v[2])
		l3 += float32(bf16ToF32(binary.LittleEndian.Uint16(b[6:])) * v[3])
		l4 += float32(bf16ToF32(binary.LittleEndian.Uint16(b[8:])) * v[4])
		l5 += float32(bf16ToF32(binary.LittleEndian.Uint16(b[10:])) * v[5])
		l6 += float32(bf16ToF32(binary.LittleEndian.Uint16(b[12:])) * v[6])
		l7 += float32(bf16ToF32(binary.LittleEndian.Uint16(b[14:])) * v[7])
	}
	return dotTail([8]float32{l0, l1, l2, l3, l4, l5, l6, l7}, w, x, n, bf16At)
}

func dotF16(w []byte, x []float32) float32 {
	var l0, l1, l2, l3, l4, l5, l6, l7 float32
	n := len(x) &^ 7
	for i := 0; i < n; i += 8 {
		b := w[2*i : 2*i+16 : 2*i+16]
		v := x[i : i+8 : i+8]
		l0 += float32(f16ToF32(binary.LittleEndian.Uint16(b[0:])) * v[0])
		l1 += float32(f16ToF32(binary.LittleEndian.Uint16(b[2:])) * v[1])
		l2 += float32(f16ToF32(binary.LittleEndian.Uint16(b[4:])) * v[2])
		l3 += float32(f16ToF32(binary.LittleEndian.Uint16(b[6:])) * v[3])
		l4 += float32(f16ToF32(binary.LittleEndian.Uint16(b[8:])) * v[4])
		l5 += float32(f16ToF32(binary.LittleEndian.Uint16(b[10:])) * v[5])
		l6 += float32(f16ToF32(binary.LittleEndian.Uint16(b[12:])) * v[6])
		l7 += float32(f16ToF32(binary.LittleEndian.Uint16(b[14:])) * v[7])
	}
	return dotTail([8]float32{l0, l1, l2, l3, l4, l5, l6, l7}, w, x, n, f16At)
}

// dotTail adds elements n… (fewer than 8) to lanes 0… and reduces.
func dotTail(l [8]float32, w []byte, x []float32, n int, weight func([]byte, int) float32) float32 {
	for i := n; i < len(x); i++ {
		l[i-n] += float32(weight(w, i) * x[i])
	}
	return reduce8(l[0], l[1], l[2], l[3], l[4], l[5], l[6], l[7])
}

func f32At(w []byte, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:]))
}
func bf16At(w []byte, i int) float32 { return bf16ToF32(binary.LittleEndian.Uint16(w[2*i:])) }
func f16At(w []byte, i int) float32  { return f16ToF32(binary.LittleEndian.Uint16(w[2*i:])) }

// dotQ4 is one Q4 row: byte k of a group holds element 2k (low nibble) and
// 2k+1 (high nibble), so a run of 4 bytes feeds lanes 0…7 in order.
func dotQ4(w, scales, biases []byte, x, sumX []float32) float32 {
	var y float32
	for g := range sumX {
		wg := w[g*GroupSize/2 : (g+1)*GroupSize/2]
		xg := x[g*GroupSize : (g+1)*GroupSize]
		var l0, l1, l2, l3, l4, l5, l6, l7 float32
		for k := 0; k < GroupSize/2; k += 4 {
			b := wg[k : k+4 : k+4]
			v := xg[2*k : 2*k+8 : 2*k+8]
			l0 += float32(float32(b[0]&15) * v[0])
			l1 += float32(float32(b[0]>>4) * v[1])
			l2 += float32(float32(b[1]&15) * v[2])
			l3 += float32(float32(b[1]>>4) * v[3])
			l4 += float32(float32(b[2]&15) * v[4])
			l5 += float32(float32(b[2]>>4) * v[5])
			l6 += float32(float32(b[3]&15) * v[6])
			l7 += float32(float32(b[3]>>4) * v[7])
		}
		y += groupTerm(scales, biases, g, reduce8(l0, l1, l2, l3, l4, l5, l6, l7), sumX[g])
	}
	return y
}

// dotQ8 is one Q8 row: byte i of a group is element i.
func dotQ8(w, scales, biases []byte, x, sumX []float32) float32 {
	var y float32
	for g := range sumX {
		wg := w[g*GroupSize : (g+1)*GroupSize]
		xg := x[g*GroupSize : (g+1)*GroupSize]
		var l0, l1, l2, l3, l4, l5, l6, l7 float32
		for i := 0; i < GroupSize; i += 8 {
			b := wg[i : i+8 : i+8]
			v := xg[i : i+8 : i+8]
			l0 += float32(float32(b[0]) * v[0])
			l1 += float32(float32(b[1]) * v[1])
			l2 += float32(float32(b[2]) * v[2])
			l3 += float32(float32(b[3]) * v[3])
			l4 += float32(float32(b[4]) * v[4])
			l5 += float32(float32(b[5]) * v[5])
			l6 += float32(float32(b[6]) * v[6])
			l7 += float32(float32(b[7]) * v[7])
		}
		y += groupTerm(scales, biases, g, reduce8(l0, l1, l2, l3, l4, l5, l6, l7), sumX[g])
	}
	return y
}

// groupTerm is s·qx + b·sx for group g, each product rounded on its own.
func groupTerm(scales, biases []byte, g int, qx, sx float32) float32 {
	s := bf16ToF32(binary.LittleEndian.Uint16(scales[2*g:]))
	b := bf16ToF32(binary.LittleEndian.Uint16(biases[2*g:]))
	return float32(s*qx) + float32(b*sx)
}

// Row widens or dequantizes row r of m into dst (len m.Cols): an embedding
// lookup. Q4/Q8 elements are scale·q + bias, exact up to the one rounding of
// the addition (scale·q needs at most 16 significant bits).
func (m *Matrix) Row(dst []float32, r int) {
	if r < 0 || r >= m.Rows || len(dst) != m.Cols {
		panic(fmt.Sprintf("kernels.Row: row %d of a %d×%d matrix into %d values", r, m.Rows, m.Cols, len(dst)))
	}
	c := m.Cols
	switch m.Enc {
	case F32:
		widen(dst, m.Data[r*c*4:(r+1)*c*4], f32At)
	case BF16:
		widen(dst, m.Data[r*c*2:(r+1)*c*2], bf16At)
	case F16:
		widen(dst, m.Data[r*c*2:(r+1)*c*2], f16At)
	case Q4, Q8:
		bits := 4
		if m.Enc == Q8 {
			bits = 8
		}
		scales, biases := rowParams(m, r)
		dequantize(dst, m.Data[r*c*bits/8:(r+1)*c*bits/8], scales, biases, bits)
	default:
		panic(fmt.Sprintf("kernels: unknown encoding %v", m.Enc))
	}
}

func widen(dst []float32, w []byte, weight func([]byte, int) float32) {
	for i := range dst {
		dst[i] = weight(w, i)
	}
}

func dequantize(dst []float32, w, scales, biases []byte, bits int) {
	perByte := 8 / bits
	mask := byte(1)<<bits - 1
	for g := 0; g < len(dst)/GroupSize; g++ {
		s := bf16ToF32(binary.LittleEndian.Uint16(scales[2*g:]))
		b := bf16ToF32(binary.LittleEndian.Uint16(biases[2*g:]))
		for i := g * GroupSize; i < (g+1)*GroupSize; i++ {
			q := w[i/perByte] >> (uint(i%perByte) * uint(bits)) & mask
			dst[i] = s*float32(q) + b
		}
	}
}

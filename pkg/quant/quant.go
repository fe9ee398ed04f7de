// Package quant implements MLX affine quantization: groups of GroupSize
// weights along a row share a scale and a bias, each weight becomes an
// unsigned code q of 4 or 8 bits, and w ≈ scale·q + bias. Codes are packed
// into little-endian uint32 words, element j of a word at bits
// [j·bits, (j+1)·bits), so with 4 bits byte m of a row holds element 2m in
// its low nibble and 2m+1 in its high nibble; with 8 bits byte order is
// element order. Scales and biases are stored as little-endian bfloat16.
//
// This package is the reference the converter writes with and the kernels
// are tested against (docs/cpu-kernels-and-io.md §4).
package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/nvmai/nvmai/pkg/limits"
)

// GroupSize is the number of weights sharing one scale and one bias.
const GroupSize = limits.QuantGroupSize

// minScale is MLX's floor on |scale| (the eps of affine_quantize), which keeps
// a constant group from dividing by zero.
const minScale = float32(1e-7)

// ErrUnsupportedBits is matched (errors.Is) by every *UnsupportedBitsError.
var ErrUnsupportedBits = errors.New("quant: unsupported bit width")

// UnsupportedBitsError reports a bit width other than 4 or 8.
type UnsupportedBitsError struct{ Bits int }

func (e *UnsupportedBitsError) Error() string {
	if e.Bits == 6 {
		return "quant: 6-bit weights were withdrawn: the model does not fit in 24 GB at 6 bits " +
			"and 6-bit codes pack badly into 32-bit words; use 4 or 8 bits (16 keeps bf16)"
	}
	return fmt.Sprintf("quant: %d-bit weights are not supported; use 4 or 8 bits (16 keeps bf16; "+
		"6-bit was withdrawn: it does not fit in 24 GB and packs badly)", e.Bits)
}

// Is makes errors.Is(err, ErrUnsupportedBits) true.
func (e *UnsupportedBitsError) Is(target error) bool { return target == ErrUnsupportedBits }

// CheckBits returns an *UnsupportedBitsError unless bits is 4 or 8.
func CheckBits(bits int) error {
	if bits != 4 && bits != 8 {
		return &UnsupportedBitsError{Bits: bits}
	}
	return nil
}

// RowBytes is the packed size of a row of cols weights.
func RowBytes(cols, bits int) int { return cols * bits / 8 }

// ParamBytes is the size of a row's scales (and, separately, of its biases):
// one bfloat16 per group.
func ParamBytes(cols int) int { return cols / GroupSize * 2 }

// QuantizeRow quantizes one row whose length is a multiple of GroupSize into
// dst (RowBytes long) and the bfloat16 scales and biases (ParamBytes long
// each). It refuses NaN, ±Inf, values beyond MaxBF16 and groups wider than
// MaxFloat32/2, naming the element or group.
//
// Scale and bias follow MLX's affine_quantize (see groupParams), then are
// rounded to bfloat16 BEFORE the codes are computed, so each code is the
// nearest one for the scale and bias the file actually stores. Does MLX do
// the same? Per cpu-kernels-and-io.md §4.1 (MLX @846d1762) it computes the
// parameters in float32 and casts them to the weight dtype for storage, which
// reads as codes from the unrounded float32 values; an older ops.cpp fallback
// instead did every step in the weight dtype (bf16). The NVMAI producer rounds
// first, as we do. Codes can differ from float32-parameter codes by one
// where (w−bias)/scale lands near a .5 boundary; ours is the nearest code for
// the stored values (up to float32 rounding of that quotient).
//
// MLX's step nudge (groupParams) means the grid can stop short of the far
// edge: for [−7.5, 7.5] at 4 bits the codes span 7.5 … −6.5625, so −7.5 is a
// full step (0.9375) away. The round-trip error is ≤ |scale|/2 inside the grid's
// span and ≤ |scale|·(n+1)/n (n = 2^bits−1) beyond it, plus bf16 slack.
func QuantizeRow(dst, scales, biases []byte, row []float32, bits int) error {
	if err := CheckBits(bits); err != nil {
		return err
	}
	if err := checkRowShape(len(row), len(dst), len(scales), len(biases), bits); err != nil {
		return err
	}
	var codes [GroupSize]uint8
	for g := 0; g < len(row)/GroupSize; g++ {
		group := row[g*GroupSize : (g+1)*GroupSize]
		wMin, wMax, err := groupRange(group, g)
		if err != nil {
			return err
		}
		s, b := quantizeGroup(&codes, group, wMin, wMax, bits)
		binary.LittleEndian.PutUint16(scales[2*g:], s)
		binary.LittleEndian.PutUint16(biases[2*g:], b)
		packCodes(dst[g*GroupSize*bits/8:], &codes, bits)
	}
	return nil
}

// DequantizeRow expands one packed row into dst: dst[i] = scale·q + bias in
// float32 (scale·q is exact: an 8-bit significand times a code of at most 8
// bits, so only the addition rounds, whether or not it is fused).
func DequantizeRow(dst []float32, src, scales, biases []byte, bits int) error {
	if err := CheckBits(bits); err != nil {
		return err
	}
	if err := checkRowShape(len(dst), len(src), len(scales), len(biases), bits); err != nil {
		return err
	}
	mask := uint8(1)<<bits - 1
	perByte := 8 / bits
	for g := 0; g < len(dst)/GroupSize; g++ {
		s := BF16ToF32(binary.LittleEndian.Uint16(scales[2*g:]))
		b := BF16ToF32(binary.LittleEndian.Uint16(biases[2*g:]))
		for i := g * GroupSize; i < (g+1)*GroupSize; i++ {
			q := src[i/perByte] >> (uint(i%perByte) * uint(bits)) & mask
			dst[i] = s*float32(q) + b
		}
	}
	return nil
}

// Quantize quantizes a row-major rows×cols matrix.
func Quantize(rows, cols int, data []float32, bits int) (packed, scales, biases []byte, err error) {
	if err := CheckBits(bits); err != nil {
		return nil, nil, nil, err
	}
	if rows < 0 || cols < 0 || cols%GroupSize != 0 || len(data) != rows*cols {
		return nil, nil, nil, fmt.Errorf("quant: %d×%d matrix with %d values: need cols a multiple of %d and rows·cols values",
			rows, cols, len(data), GroupSize)
	}
	rb, pb := RowBytes(cols, bits), ParamBytes(cols)
	packed, scales, biases = make([]byte, rows*rb), make([]byte, rows*pb), make([]byte, rows*pb)
	for r := range rows {
		err := QuantizeRow(packed[r*rb:(r+1)*rb], scales[r*pb:(r+1)*pb], biases[r*pb:(r+1)*pb],
			data[r*cols:(r+1)*cols], bits)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("row %d: %w", r, err)
		}
	}
	return packed, scales, biases, nil
}

func checkRowShape(n, packed, scales, biases, bits int) error {
	if n%GroupSize != 0 {
		return fmt.Errorf("quant: row of %d weights is not a multiple of the group size %d", n, GroupSize)
	}
	if packed != RowBytes(n, bits) || scales != ParamBytes(n) || biases != ParamBytes(n) {
		return fmt.Errorf("quant: %d-bit row of %d weights needs %d packed bytes and %d bytes each of scales and biases, got %d, %d and %d",
			bits, n, RowBytes(n, bits), ParamBytes(n), packed, scales, biases)
	}
	return nil
}

// maxGroupRange bounds max−min of a group. The dequantized grid reaches
// n·scale from the bias, and MLX's nudge plus bfloat16 rounding can make
// n·|scale| exceed the range by up to (n+1)/n·(1+2⁻⁸) ≈ 1.07×; half the
// float32 range leaves room for that, so scale·q never overflows.
const maxGroupRange = math.MaxFloat32 / 2

// checkQuantizable rejects what the format cannot represent: NaN and
// infinities, values whose bfloat16 bias would overflow, and groups whose
// max−min exceeds maxGroupRange (their dequantized grid would overflow).
// groupRange returns the group's minimum and maximum in one pass, refusing
// what cannot be quantized: NaN, ±Inf, values beyond MaxBF16, and groups
// whose range would overflow float32 when dequantized.
func groupRange(group []float32, g int) (wMin, wMax float32, err error) {
	wMin, wMax = group[0], group[0]
	for i, v := range group {
		if !(v <= MaxBF16 && v >= -MaxBF16) { // also catches NaN
			return 0, 0, fmt.Errorf("quant: element %d (group %d) is %g; only finite values within ±%g can be quantized",
				g*GroupSize+i, g, v, MaxBF16)
		}
		if v < wMin {
			wMin = v
		}
		if v > wMax {
			wMax = v
		}
	}
	if float64(wMax)-float64(wMin) > maxGroupRange {
		return 0, 0, fmt.Errorf("quant: group %d spans %g..%g, wider than %g: its dequantized values would overflow float32",
			g, wMin, wMax, maxGroupRange)
	}
	return wMin, wMax, nil
}

// groupParams is MLX's affine_quantize (mlx/ops.cpp, cpu-kernels-and-io.md
// §4.1) for one group, in float32: the step is (max−min)/(2^bits−1), floored
// at 1e-7; its sign points from the edge of larger magnitude into the group,
// so the scale is negative when max dominates; the step is then nudged so the
// edge is an integer number of steps from 0, which makes 0 a code (−q0) up to
// float32 rounding of edge/q0. When the edge is under half a step from 0 the
// bias is 0 instead.
func groupParams(wMin, wMax float32, bits int) (scale, bias float32) {
	nBins := float32(int(1)<<bits - 1)
	scale = max((wMax-wMin)/nBins, minScale)
	edge := wMin
	if !(abs32(wMin) > abs32(wMax)) {
		scale, edge = -scale, wMax
	}
	q0 := roundEven(edge / scale)
	if q0 == 0 {
		return scale, 0
	}
	return edge / q0, edge
}

// quantizeGroup fills codes and returns the bfloat16 scale and bias.
func quantizeGroup(codes *[GroupSize]uint8, group []float32, wMin, wMax float32, bits int) (scaleBF16, biasBF16 uint16) {
	scale, bias := groupParams(wMin, wMax, bits)
	scaleBF16, biasBF16 = F32ToBF16(scale), F32ToBF16(bias)
	s, b := BF16ToF32(scaleBF16), BF16ToF32(biasBF16)
	nBins := float32(int(1)<<bits - 1)
	for i, v := range group {
		codes[i] = clipCode(roundEven((v-b)/s), nBins)
	}
	return scaleBF16, biasBF16
}

// clipCode clamps a rounded code into [0, nBins]. A NaN (0/0 when a huge
// constant group's scale underflowed to 0) becomes 0, which dequantizes to
// the bias, the group's value.
func clipCode(q, nBins float32) uint8 {
	if !(q > 0) {
		return 0
	}
	return uint8(min(q, nBins))
}

func packCodes(dst []byte, codes *[GroupSize]uint8, bits int) {
	if bits == 8 {
		copy(dst, codes[:])
		return
	}
	for m := range GroupSize / 2 {
		dst[m] = codes[2*m] | codes[2*m+1]<<4
	}
}

// roundEven is MLX's round (std::rint): nearest, ties to even.
func roundEven(v float32) float32 { return float32(math.RoundToEven(float64(v))) }

func abs32(v float32) float32 { return float32(math.Abs(float64(v))) }

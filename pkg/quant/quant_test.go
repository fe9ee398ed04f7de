package quant

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// knownGroup is a group whose scale, bias and codes were derived by hand
// from the MLX algorithm (cpu-kernels-and-io.md §4.1); each case's comment
// shows the derivation.
type knownGroup struct {
	name        string
	bits        int
	value       func(i int) float32
	scale, bias uint16 // bfloat16 bits
	code        func(i int) uint8
	// zeroExact: 0.0 in the group must dequantize to exactly 0. True only
	// where edge and edge/q0 are bfloat16 values; otherwise rounding the
	// stored scale moves the zero code (ramp: 63 − 15·4.1875 = 0.1875).
	zeroExact bool
}

var knownGroups = []knownGroup{
	{
		// max 63 dominates: step −63/15 = −4.2, edge 63, q0 = round(63/−4.2) = −15,
		// scale = 63/−15 = −4.2 → bf16 −4.1875 (0xC086: 134/32), bias 63 (0x427C).
		// Codes from the stored values: round((63−i)/4.1875) = round((63−i)·16/67).
		name: "ramp 0..63, 4-bit", bits: 4,
		value: func(i int) float32 { return float32(i) },
		scale: 0xC086, bias: 0x427C,
		code: func(i int) uint8 { return uint8(math.RoundToEven(float64(63-i) * 16 / 67)) },
	},
	{
		// step −63/255, q0 = −255, scale = 63/−255 = −0.247059 → bf16 −253/1024
		// (0xBE7D), bias 63. Codes round((63−i)·1024/253): 255 at i=0, 0 at i=63.
		name: "ramp 0..63, 8-bit", bits: 8,
		value: func(i int) float32 { return float32(i) },
		scale: 0xBE7D, bias: 0x427C,
		code: func(i int) uint8 { return uint8(math.RoundToEven(float64(63-i) * 1024 / 253)) },
	},
	{
		// Constant 0.5: step floored at 1e-7 and negated (|min| > |max| is
		// false), q0 = round(0.5/−1e-7) = −5e6 ≠ 0, so bias = 0.5 (0x3F00) and
		// scale = 0.5/−5e6 = −1e-7 → bf16 0xB3D7. Every code is 0.
		name: "constant 0.5", bits: 4,
		value: func(int) float32 { return 0.5 },
		scale: 0xB3D7, bias: 0x3F00,
		code: func(int) uint8 { return 0 },
	},
	{
		// All zero: scale −1e-7, q0 = round(0/−1e-7) = 0, so bias = 0 and the
		// scale stays −1e-7 (0xB3D7). Every code is 0.
		name: "all zero", bits: 8,
		value: func(int) float32 { return 0 },
		scale: 0xB3D7, bias: 0x0000,
		code: func(int) uint8 { return 0 },
	},
	{
		// −2 + 0.25·(i mod 16): min −2 dominates 1.75, so the scale stays
		// positive: 3.75/15 = 0.25 (0x3E80), edge −2, q0 = −8, scale −2/−8 =
		// 0.25, bias −2 (0xC000). Code = i mod 16; 0.0 is code 8, exactly.
		name: "negative edge, 4-bit", bits: 4,
		value: func(i int) float32 { return -2 + 0.25*float32(i%16) },
		scale: 0x3E80, bias: 0xC000,
		code:      func(i int) uint8 { return uint8(i % 16) },
		zeroExact: true,
	},
	{
		// (4i−128)/64 for i<63 and 127/64 last: range 255/64, scale +1/64
		// (0x3C80), edge −2, q0 = −128, bias −2. Codes 4i, then 255; 0.0 is 128.
		name: "negative edge, 8-bit", bits: 8,
		value: func(i int) float32 {
			if i == 63 {
				return 127.0 / 64
			}
			return float32(4*i-128) / 64
		},
		scale: 0x3C80, bias: 0xC000,
		code: func(i int) uint8 {
			if i == 63 {
				return 255
			}
			return uint8(4 * i)
		},
		zeroExact: true,
	},
	{
		// [−7.5, 7.5] with zeros: |min| > |max| is false, so step −1, edge 7.5,
		// q0 = round(−7.5) = −8 (ties to even), scale 7.5/−8 = −0.9375 (0xBF70),
		// bias 7.5 (0x40F0). The grid 7.5 … −6.5625 stops a full step short of
		// −7.5, which clips to code 15: MLX's nudge, kept deliberately.
		name: "symmetric, far edge clipped", bits: 4,
		value: func(i int) float32 {
			switch i {
			case 0:
				return -7.5
			case 1:
				return 7.5
			}
			return 0
		},
		scale: 0xBF70, bias: 0x40F0,
		code: func(i int) uint8 {
			switch i {
			case 0:
				return 15
			case 1:
				return 0
			}
			return 8
		},
		zeroExact: true,
	},
	{
		// Alternating −1e-8, 2e-8: the step is floored at 1e-7 and negated,
		// edge 2e-8, q0 = round(−0.2) = 0, so bias 0 and scale −1e-7. Codes 0.
		name: "below the scale floor", bits: 4,
		value: func(i int) float32 {
			if i%2 == 0 {
				return -1e-8
			}
			return 2e-8
		},
		scale: 0xB3D7, bias: 0x0000,
		code: func(int) uint8 { return 0 },
	},
}

// unpackCode reads element i of a packed row through its uint32 word, the
// way MLX defines the layout, independent of DequantizeRow's byte access.
func unpackCode(packed []byte, i, bits int) uint8 {
	perWord := 32 / bits
	word := binary.LittleEndian.Uint32(packed[4*(i/perWord):])
	return uint8(word >> (uint(i%perWord) * uint(bits)) & (1<<bits - 1))
}

func TestQuantizeKnownGroups(t *testing.T) {
	for _, tc := range knownGroups {
		t.Run(tc.name, func(t *testing.T) {
			row := make([]float32, GroupSize)
			for i := range row {
				row[i] = tc.value(i)
			}
			packed := make([]byte, RowBytes(GroupSize, tc.bits))
			scales, biases := make([]byte, 2), make([]byte, 2)
			if err := QuantizeRow(packed, scales, biases, row, tc.bits); err != nil {
				t.Fatal(err)
			}
			if s := binary.LittleEndian.Uint16(scales); s != tc.scale {
				t.Errorf("scale = %#04x (%g), want %#04x (%g)", s, BF16ToF32(s), tc.scale, BF16ToF32(tc.scale))
			}
			if b := binary.LittleEndian.Uint16(biases); b != tc.bias {
				t.Errorf("bias = %#04x (%g), want %#04x (%g)", b, BF16ToF32(b), tc.bias, BF16ToF32(tc.bias))
			}
			deq := make([]float32, GroupSize)
			if err := DequantizeRow(deq, packed, scales, biases, tc.bits); err != nil {
				t.Fatal(err)
			}
			for i := range row {
				q := tc.code(i)
				if got := unpackCode(packed, i, tc.bits); got != q {
					t.Errorf("code[%d] = %d, want %d (value %g)", i, got, q, row[i])
				}
				want := BF16ToF32(tc.bias) + BF16ToF32(tc.scale)*float32(q)
				if deq[i] != want {
					t.Errorf("dequantized[%d] = %g, want %g", i, deq[i], want)
				}
				if row[i] == 0 && tc.zeroExact && deq[i] != 0 {
					t.Errorf("0.0 at %d dequantizes to %g, want exactly 0", i, deq[i])
				}
			}
		})
	}
}

func TestPackedByteLayout(t *testing.T) {
	row := make([]float32, GroupSize)
	for i := range row {
		row[i] = -2 + 0.25*float32(i%16) // codes i mod 16, as in knownGroups
	}
	packed4 := make([]byte, 32)
	if err := QuantizeRow(packed4, make([]byte, 2), make([]byte, 2), row, 4); err != nil {
		t.Fatal(err)
	}
	// Element 2m in the low nibble of byte m, element 2m+1 in the high one.
	want4 := strings.Repeat("\x10\x32\x54\x76\x98\xba\xdc\xfe", 4)
	if string(packed4) != want4 {
		t.Errorf("4-bit bytes = % x, want % x", packed4, want4)
	}
	packed8 := make([]byte, 64)
	if err := QuantizeRow(packed8, make([]byte, 2), make([]byte, 2), row, 8); err != nil {
		t.Fatal(err)
	}
	// 8-bit: scale 3.75/255 nudged so that −2 is q0 steps away; the codes
	// must at least be monotone in byte order with 0 at element 0.
	if packed8[0] != 0 || packed8[15] != 255 || packed8[16] != 0 {
		t.Errorf("8-bit bytes = % x, want element order (0 … 255, repeating)", packed8)
	}
}

func TestZeroIsACodeWhenTheGroupSpansZero(t *testing.T) {
	// In float32, MLX's scale = edge/q0 and bias = edge put 0.0 at code −q0,
	// up to the rounding of edge/q0 (one float32 ulp of the bias).
	rng := rand.New(rand.NewPCG(1, 2))
	group := make([]float32, GroupSize)
	for trial := range 2000 {
		for i := range group {
			group[i] = float32(rng.NormFloat64() * math.Exp(rng.Float64()*20-10))
		}
		group[trial%GroupSize] = 0
		for _, bits := range []int{4, 8} {
			lo, hi, err := groupRange(group, 0)
			if err != nil {
				t.Fatal(err)
			}
			s, b := groupParams(lo, hi, bits)
			if b == 0 {
				continue // edge under half a step from 0: bias 0 makes code 0 exact
			}
			k := roundEven(-b / s)
			if k < 0 || k > float32(int(1)<<bits-1) {
				t.Fatalf("bits %d, scale %g, bias %g: zero's code %g is out of range", bits, s, b, k)
			}
			if r := s*k + b; math.Abs(float64(r)) > math.Ldexp(math.Abs(float64(b)), -22) {
				t.Fatalf("bits %d, scale %g, bias %g: code %g dequantizes to %g, want 0 within 2^-22·|bias|", bits, s, b, k, r)
			}
		}
	}
}

// roundTripBound is the largest |w − dequantized| allowed for w in a group
// with stored scale s and bias b: |s|/2 when w lies within the grid
// b … b + n·s, and up to |s|·(n+1)/n beyond it (MLX's nudge can leave the
// far edge short by less than one step), plus 2^-8 of the grid extent for
// bfloat16 rounding of scale and bias, plus float32 arithmetic slack of
// 2^-22 of the magnitudes involved.
func roundTripBound(w, s, b float32, bits int) float64 {
	n := float64(int(1)<<bits - 1)
	as, ab := math.Abs(float64(s)), math.Abs(float64(b))
	arith := math.Ldexp(math.Abs(float64(w))+ab+n*as, -22)
	lo, hi := float64(b), float64(b)+n*float64(s)
	if lo > hi {
		lo, hi = hi, lo
	}
	if float64(w) >= lo && float64(w) <= hi {
		return as/2 + arith
	}
	return as*(n+1)/n + math.Ldexp(ab+n*as, -8) + arith
}

// checkRoundTrip quantizes row and fails if any element's round-trip error
// exceeds roundTripBound.
func checkRoundTrip(t *testing.T, row []float32, bits int) {
	t.Helper()
	packed := make([]byte, RowBytes(len(row), bits))
	scales, biases := make([]byte, ParamBytes(len(row))), make([]byte, ParamBytes(len(row)))
	if err := QuantizeRow(packed, scales, biases, row, bits); err != nil {
		t.Fatalf("QuantizeRow: %v", err)
	}
	deq := make([]float32, len(row))
	if err := DequantizeRow(deq, packed, scales, biases, bits); err != nil {
		t.Fatalf("DequantizeRow: %v", err)
	}
	for i, w := range row {
		g := i / GroupSize
		s := BF16ToF32(binary.LittleEndian.Uint16(scales[2*g:]))
		b := BF16ToF32(binary.LittleEndian.Uint16(biases[2*g:]))
		bound := roundTripBound(w, s, b, bits)
		if e := math.Abs(float64(w) - float64(deq[i])); !(e <= bound) {
			t.Fatalf("%d-bit element %d: %g dequantizes to %g (error %g > bound %g; scale %g, bias %g)",
				bits, i, w, deq[i], e, bound, s, b)
		}
	}
}

func TestRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	distributions := map[string]func() float64{
		"normal":       rng.NormFloat64,
		"positive":     func() float64 { return 1 + rng.Float64() },
		"negative":     func() float64 { return -0.01 - rng.Float64()*0.01 },
		"outliers":     func() float64 { return rng.NormFloat64() * math.Pow(10, float64(rng.IntN(3))) },
		"tiny":         func() float64 { return rng.NormFloat64() * 1e-9 },
		"huge":         func() float64 { return rng.NormFloat64() * 1e36 },
		"wide dynamic": func() float64 { return rng.NormFloat64() * math.Exp(rng.Float64()*60-30) },
	}
	row := make([]float32, 16*GroupSize)
	for name, draw := range distributions {
		t.Run(name, func(t *testing.T) {
			for range 20 {
				for i := range row {
					row[i] = float32(draw())
				}
				checkRoundTrip(t, row, 4)
				checkRoundTrip(t, row, 8)
			}
		})
	}
}

func TestQuantizeMatrixMatchesRows(t *testing.T) {
	const rows, cols = 3, 2 * GroupSize
	data := make([]float32, rows*cols)
	for i := range data {
		data[i] = float32(math.Sin(float64(i)))
	}
	packed, scales, biases, err := Quantize(rows, cols, data, 4)
	if err != nil {
		t.Fatal(err)
	}
	for r := range rows {
		p, s, b := make([]byte, cols/2), make([]byte, 4), make([]byte, 4)
		if err := QuantizeRow(p, s, b, data[r*cols:(r+1)*cols], 4); err != nil {
			t.Fatal(err)
		}
		if string(p) != string(packed[r*cols/2:(r+1)*cols/2]) || string(s) != string(scales[r*4:(r+1)*4]) ||
			string(b) != string(biases[r*4:(r+1)*4]) {
			t.Errorf("row %d of Quantize differs from QuantizeRow", r)
		}
	}
	data[cols+5] = float32(math.NaN())
	if _, _, _, err := Quantize(rows, cols, data, 4); err == nil || !strings.Contains(err.Error(), "row 1") ||
		!strings.Contains(err.Error(), "element 5") {
		t.Errorf("Quantize with a NaN in row 1 = %v, want an error naming row 1, element 5", err)
	}
}

func TestUnsupportedBits(t *testing.T) {
	row := make([]float32, GroupSize)
	for _, bits := range []int{0, 2, 3, 5, 6, 16} {
		err := QuantizeRow(make([]byte, 64), make([]byte, 2), make([]byte, 2), row, bits)
		var ube *UnsupportedBitsError
		if !errors.Is(err, ErrUnsupportedBits) || !errors.As(err, &ube) || ube.Bits != bits {
			t.Errorf("bits %d: err = %v, want an *UnsupportedBitsError matching ErrUnsupportedBits", bits, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "use 4 or 8") || !strings.Contains(msg, "16 keeps bf16") {
			t.Errorf("bits %d: message %q does not say what to use instead", bits, msg)
		}
		if bits == 6 && !strings.Contains(msg, "withdrawn") {
			t.Errorf("bits 6: message %q does not say 6-bit was withdrawn", msg)
		}
		if err := DequantizeRow(row, make([]byte, 64), make([]byte, 2), make([]byte, 2), bits); !errors.Is(err, ErrUnsupportedBits) {
			t.Errorf("DequantizeRow bits %d: err = %v, want ErrUnsupportedBits", bits, err)
		}
	}
}

func TestQuantizeRowRejects(t *testing.T) {
	group := func(i int, v float32) []float32 {
		row := make([]float32, 2*GroupSize)
		row[i] = v
		return row
	}
	spanning := make([]float32, GroupSize)
	spanning[0], spanning[1] = -1e38, 1e38
	cases := []struct {
		name    string
		row     []float32
		packed  int
		wantMsg string
	}{
		{"length not a group multiple", make([]float32, 65), 33, "not a multiple of the group size"},
		{"packed too short", make([]float32, 64), 31, "needs 32 packed bytes"},
		{"NaN", group(70, float32(math.NaN())), 64, "element 70 (group 1) is NaN"},
		{"+Inf", group(3, float32(math.Inf(1))), 64, "element 3 (group 0) is +Inf"},
		{"beyond bf16", group(3, math.MaxFloat32), 64, "element 3 (group 0)"},
		{"range overflow", spanning, 32, "group 0 spans"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.row) / GroupSize * 2
			err := QuantizeRow(make([]byte, tc.packed), make([]byte, n), make([]byte, n), tc.row, 4)
			if err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %v, want one containing %q", err, tc.wantMsg)
			}
		})
	}
}

func TestDequantizeRowRejectsBadLengths(t *testing.T) {
	if err := DequantizeRow(make([]float32, 64), make([]byte, 64), make([]byte, 4), make([]byte, 2), 8); err == nil {
		t.Error("DequantizeRow with 4 scale bytes for one group succeeded")
	}
}

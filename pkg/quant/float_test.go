package quant

import (
	"math"
	"testing"
)

// halfValue decodes an IEEE half from its definition in float64 arithmetic,
// independent of the bit tricks in F16ToF32.
func halfValue(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	frac := float64(h & 0x3ff)
	switch exp {
	case 0x1f:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case 0:
		return sign * math.Ldexp(frac, -24)
	}
	return sign * math.Ldexp(1+frac/1024, exp-15)
}

func TestF16ToF32Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		got := F16ToF32(uint16(h))
		want := halfValue(uint16(h))
		if math.IsNaN(want) {
			bits := math.Float32bits(got)
			if !math.IsNaN(float64(got)) || bits>>31 != uint32(h>>15) || bits>>13&0x3ff != uint32(h&0x3ff) {
				t.Fatalf("F16ToF32(%#04x) = %#08x, want a NaN with the same sign and payload", h, bits)
			}
			continue
		}
		if math.Float32bits(got) != math.Float32bits(float32(want)) {
			t.Fatalf("F16ToF32(%#04x) = %g (%#08x), want %g", h, got, math.Float32bits(got), want)
		}
	}
}

func TestF32ToF16Exhaustive(t *testing.T) {
	// Every half round-trips; every midpoint between neighbours rounds to the
	// even one; one float32 ulp either side of it rounds to the nearer one.
	for h := range 1 << 16 {
		v := halfValue(uint16(h))
		if math.IsNaN(v) {
			if got := F32ToF16(float32(v)); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
				t.Fatalf("F32ToF16(NaN) = %#04x, want a NaN", got)
			}
			continue
		}
		if got := F32ToF16(float32(v)); got != uint16(h) && !(v == 0 && got&0x7fff == 0 && got == uint16(h)) {
			t.Fatalf("F32ToF16(%g) = %#04x, want %#04x", v, got, h)
		}
		next := uint16(h) + 1
		if next&0x7fff >= 0x7c00 || next&0x7fff == 0 {
			continue // no finite neighbour of the same sign above (the overflow edge is checked below)
		}
		checkTie(t, "F32ToF16", F32ToF16, uint16(h), next, v, halfValue(next))
	}
	if got := F32ToF16(65520); got != 0x7c00 {
		t.Errorf("F32ToF16(65520) = %#04x, want +Inf (65520 is the midpoint past the largest half)", got)
	}
	if got := F32ToF16(65519.99); got != 0x7bff {
		t.Errorf("F32ToF16(65519.99) = %#04x, want 0x7bff", got)
	}
	if got := F32ToF16(float32(math.Ldexp(1, -25))); got != 0 {
		t.Errorf("F32ToF16(2^-25) = %#04x, want 0 (tie to even)", got)
	}
}

// checkTie checks rounding around the midpoint of two adjacent codes lo<hi in
// magnitude (both of one sign), whose values are a and b.
func checkTie(t *testing.T, name string, round func(float32) uint16, lo, hi uint16, a, b float64) {
	t.Helper()
	mid := float32((a + b) / 2) // exact: one more significant bit than the narrow type
	if float64(mid) != (a+b)/2 {
		t.Fatalf("%s: midpoint of %g and %g is not a float32", name, a, b)
	}
	even := lo
	if lo&1 == 1 {
		even = hi
	}
	if got := round(mid); got != even {
		t.Fatalf("%s(%g) (tie between %#04x and %#04x) = %#04x, want %#04x", name, mid, lo, hi, got, even)
	}
	below := math.Nextafter32(mid, float32(a))
	above := math.Nextafter32(mid, float32(b))
	if got := round(below); got != lo {
		t.Fatalf("%s(%g) (just below the midpoint) = %#04x, want %#04x", name, below, got, lo)
	}
	if got := round(above); got != hi {
		t.Fatalf("%s(%g) (just above the midpoint) = %#04x, want %#04x", name, above, got, hi)
	}
}

// bf16Value decodes a bfloat16 from its definition in float64 arithmetic.
func bf16Value(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>7) & 0xff
	frac := float64(h & 0x7f)
	switch exp {
	case 0xff:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case 0:
		return sign * math.Ldexp(frac, -133)
	}
	return sign * math.Ldexp(1+frac/128, exp-127)
}

func TestBF16Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		v := bf16Value(uint16(h))
		got := BF16ToF32(uint16(h))
		if math.IsNaN(v) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("BF16ToF32(%#04x) = %g, want NaN", h, got)
			}
			if r := F32ToBF16(got); r&0x7f80 != 0x7f80 || r&0x7f == 0 || r&0x8000 != uint16(h)&0x8000 {
				t.Fatalf("F32ToBF16(NaN %#04x) = %#04x, want a NaN of the same sign", h, r)
			}
			continue
		}
		if math.Float32bits(got) != math.Float32bits(float32(v)) {
			t.Fatalf("BF16ToF32(%#04x) = %g, want %g", h, got, v)
		}
		if r := F32ToBF16(got); r != uint16(h) {
			t.Fatalf("F32ToBF16(%g) = %#04x, want %#04x", got, r, h)
		}
		next := uint16(h) + 1
		if next&0x7fff >= 0x7f80 || next&0x7fff == 0 {
			continue
		}
		checkTie(t, "F32ToBF16", F32ToBF16, uint16(h), next, v, bf16Value(next))
	}
}

func TestF32ToBF16NaNNeverBecomesInf(t *testing.T) {
	// A NaN whose payload sits only in the low 16 bits would truncate or
	// round to an infinity (or to the next exponent) if treated as a number.
	for _, bits := range []uint32{0x7f800001, 0xff800001, 0x7fffffff, 0x7f80ffff, 0x7fc00000, 0xffc00000} {
		r := F32ToBF16(math.Float32frombits(bits))
		if r&0x7f80 != 0x7f80 || r&0x7f == 0 || uint32(r>>15) != bits>>31 {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x, want a NaN of the same sign", bits, r)
		}
	}
	if r := F32ToBF16(math.MaxFloat32); r != 0x7f80 {
		t.Errorf("F32ToBF16(MaxFloat32) = %#04x, want +Inf", r)
	}
	// The midpoint between MaxBF16 and 2^128 ties to the even code, +Inf.
	if r := F32ToBF16(math.Float32frombits(0x7f7f8000)); r != 0x7f80 {
		t.Errorf("F32ToBF16(midpoint past MaxBF16) = %#04x, want +Inf", r)
	}
	if r := F32ToBF16(math.Float32frombits(0x7f7f7fff)); r != 0x7f7f {
		t.Errorf("F32ToBF16(just below the overflow midpoint) = %#04x, want 0x7f7f", r)
	}
	if r := F32ToBF16(MaxBF16); r != 0x7f7f {
		t.Errorf("F32ToBF16(MaxBF16) = %#04x, want 0x7f7f", r)
	}
}

func TestWiden(t *testing.T) {
	src := []byte{0x80, 0x3f, 0x00, 0xc0} // bf16 1.0, -2.0 little-endian
	dst := make([]float32, 2)
	WidenBF16(dst, src)
	if dst[0] != 1 || dst[1] != -2 {
		t.Errorf("WidenBF16 = %v, want [1 -2]", dst)
	}
	WidenF16(dst, []byte{0x00, 0x3c, 0x01, 0x00}) // half 1.0, smallest subnormal
	if dst[0] != 1 || dst[1] != float32(math.Ldexp(1, -24)) {
		t.Errorf("WidenF16 = %v, want [1 2^-24]", dst)
	}
	WidenF32(dst, []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0})
	if dst[0] != 1 || dst[1] != -2 {
		t.Errorf("WidenF32 = %v, want [1 -2]", dst)
	}
	out := make([]byte, 4)
	NarrowBF16(out, []float32{1, -2})
	if string(out) != string(src) {
		t.Errorf("NarrowBF16 = % x, want % x", out, src)
	}
	defer func() {
		if recover() == nil {
			t.Error("WidenBF16 with a short source did not panic")
		}
	}()
	WidenBF16(dst, src[:3])
}

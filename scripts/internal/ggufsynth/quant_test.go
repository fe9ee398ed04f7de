package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// Every finite half converts to float32 and back to itself, and the
// midpoints between neighbours round to the even one (IEEE round to nearest
// even, which F16C and ggml's fallback use).
func TestFP16RoundTripAndTiesToEven(t *testing.T) {
	for h := uint32(0); h < 1<<16; h++ {
		if h&0x7c00 == 0x7c00 {
			continue // Inf, NaN
		}
		if got := fp32ToFP16(fp16ToFP32(uint16(h))); got != uint16(h) {
			t.Fatalf("half %#04x → %v → %#04x", h, fp16ToFP32(uint16(h)), got)
		}
		next := uint16(h + 1)
		if h&0x7fff == 0x7bff || h == 0x7fff {
			continue
		}
		mid := (float64(fp16ToFP32(uint16(h))) + float64(fp16ToFP32(next))) / 2
		want := uint16(h)
		if h&1 == 1 {
			want = next
		}
		if got := fp32ToFP16(float32(mid)); float64(float32(mid)) == mid && got != want {
			t.Fatalf("midpoint %v of %#04x and %#04x → %#04x, want %#04x", mid, h, next, got, want)
		}
	}
	for _, tc := range []struct {
		in   float32
		want uint16
	}{{65504, 0x7bff}, {65520, 0x7c00}, {1e9, 0x7c00}, {-1e9, 0xfc00}, {float32(math.Inf(1)), 0x7c00}, {0x1p-25, 0}, {0x1.8p-25, 1}} {
		if got := fp32ToFP16(tc.in); got != tc.want {
			t.Errorf("fp32ToFP16(%v) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
}

// Hand-worked blocks: the scale is the value of largest magnitude over −8
// (Q4_0; the first on a tie) or max|x|/127 (Q8_0), codes truncate x/d + 8.5
// (Q4_0, at most 15) or round halves away from zero (Q8_0).
func TestQuantizeHandWorkedBlocks(t *testing.T) {
	ramp := make([]float32, qk)
	for j := range ramp {
		ramp[j] = float32(j - 16) // −16 … 15: largest magnitude −16, d = 2
	}
	q4 := quantizeQ4_0(nil, ramp)
	if d := fp16ToFP32(uint16(q4[0]) | uint16(q4[1])<<8); d != 2 {
		t.Fatalf("Q4_0 scale %v, want 2", d)
	}
	for j := 0; j < 16; j++ {
		lo := min(15, int(float32(ramp[j])/2+8.5))
		hi := min(15, int(float32(ramp[16+j])/2+8.5))
		if want := byte(lo | hi<<4); q4[2+j] != want {
			t.Fatalf("Q4_0 byte %d = %#02x, want %#02x", j, q4[2+j], want)
		}
	}
	halves := make([]float32, qk)
	halves[0] = 127 // d = 1, so the others are coded as themselves rounded
	for j := 1; j < qk; j++ {
		halves[j] = float32(j-16) + 0.5
	}
	q8 := quantizeQ8_0(nil, halves)
	for j := 1; j < qk; j++ {
		want := int8(math.Round(float64(halves[j]))) // away from zero
		if int8(q8[2+j]) != want {
			t.Fatalf("Q8_0 code %d = %d, want %d", j, int8(q8[2+j]), want)
		}
	}
	zero := quantizeQ4_0(nil, make([]float32, qk))
	// 0 / −8 is −0: ggml stores the scale as the half −0 (0x8000).
	if want := append([]byte{0, 0x80}, bytes.Repeat([]byte{0x88}, 16)...); !bytes.Equal(zero, want) {
		t.Fatalf("Q4_0 of zeros = %x, want %x", zero, want)
	}
}

// With node-llama-cpp installed (scripts/vs-llamacpp.sh does it), the
// quantizers equal ggml's own, block for block.
func TestQuantizersEqualGGML(t *testing.T) {
	dir := defaultLibDir()
	if _, err := os.Stat(filepath.Join(dir, "libggml-base.so")); err != nil {
		t.Skipf("libggml-base.so not installed in %s (scripts/vs-llamacpp.sh installs it)", dir)
	}
	if err := runSelftest(dir); err != nil {
		t.Fatal(err)
	}
}

// The file's bytes depend on the seed, not on the thread count.
func TestBytesIndependentOfThreads(t *testing.T) {
	tensors := []*tensor{
		{name: "a", ne: []int64{64, 3000}, typ: typeQ4_0, init: uniformFor(64)},
		{name: "b", ne: []int64{32, 5}, typ: typeF32, init: initKind{lo: -1, hi: 1}},
	}
	var off int64
	for _, x := range tensors {
		x.offset = off
		off += alignUp(x.bytes())
	}
	header, err := encodeHeader([]kv{{"general.architecture", "test"}}, tensors)
	if err != nil {
		t.Fatal(err)
	}
	var files [][]byte
	for _, threads := range []int{1, 3} {
		p := filepath.Join(t.TempDir(), "m.gguf")
		if err := writeFile(p, header, tensors, int64(len(header))+off, 7, threads); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Fatal("1 and 3 threads wrote different bytes")
	}
}

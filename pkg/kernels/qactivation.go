package kernels

import (
	"fmt"
	"math"
	"sync"
	"unsafe"
)

// QActivation is a batch of activation vectors quantized for the integer
// Q4/Q8 kernels: per group g of 64 values, dx[g] = max|x|/127 and
// xq = round(x/dx) as int8 (round half to even, clamped to ±127; an all-zero
// group has dx = 0 and xq = 0), plus sumX[g] = Σx in the reference kernels'
// 8-lane order, so the bias term b·Σx is bitwise the float reference's.
//
// A QActivation is reused across calls to avoid allocation; quantize once and
// share it across every matrix that reads the same x (gate and up of all
// experts, the pool's threads). It is read-only while kernels use it.
//
// Layout, per token, in blocks of blockGroups groups (zero-padded past the
// last group, so kernels may read whole blocks):
//
//   - q8: element order, 64 bytes per group.
//   - q4: groups in pairs (A, B) of 128 bytes: even elements of A, even of B,
//     odd of A, odd of B (32 each). A 64-byte load of Q4 weights holds A then
//     B, low nibbles = even elements and high nibbles = odd ones, so its
//     masked low and high nibbles meet their activations lane for lane.
//   - ds: per block, dx of its 16 groups then Σx of its 16 groups.
//   - sumQ: Σxq per group, for kernels that shift unsigned weights to signed.
type QActivation struct {
	tokens, cols, groups, blocks int

	q4, q8 []int8
	ds     []float32
	sumQ   []int32

	q4Buf, q8Buf []int8 // backing arrays of q4 and q8, with alignment slack

	// The batched kernel's layout of the tokens, Q4 and Q8 order, built on
	// first use after each Quantize (batchLayout).
	batchMu    sync.Mutex
	batch      [2]qBatchLayout
	batchValid [2]bool
}

// blockGroups is the number of groups the kernels combine in one vector of
// float lanes (see qint_generic.go); activations are padded to whole blocks.
const blockGroups = 16

// blockBytes is one block of quantized activations (q4 or q8).
const blockBytes = blockGroups * GroupSize

// QuantizeActivation quantizes one activation vector (len a positive multiple
// of GroupSize) into a new QActivation.
func QuantizeActivation(x []float32) *QActivation {
	qa := new(QActivation)
	qa.Quantize(x, len(x))
	return qa
}

// Quantize replaces qa's contents with x, a batch of len(x)/cols tokens of
// cols values each (cols a positive multiple of GroupSize). It reuses qa's
// buffers when they are large enough.
func (qa *QActivation) Quantize(x []float32, cols int) {
	if cols <= 0 || cols%GroupSize != 0 || len(x)%cols != 0 {
		panic(fmt.Sprintf("kernels.QActivation.Quantize: %d values in tokens of %d; cols must be a positive multiple of %d dividing len(x)",
			len(x), cols, GroupSize))
	}
	qa.resize(len(x)/cols, cols)
	for tok := range qa.tokens {
		qa.quantizeToken(tok, x[tok*cols:(tok+1)*cols])
	}
}

// Tokens is the number of activation vectors qa holds.
func (qa *QActivation) Tokens() int { return qa.tokens }

// Cols is the length of each activation vector.
func (qa *QActivation) Cols() int { return qa.cols }

func (qa *QActivation) resize(tokens, cols int) {
	qa.tokens, qa.cols = tokens, cols
	qa.batchValid = [2]bool{}
	qa.groups = cols / GroupSize
	qa.blocks = (qa.groups + blockGroups - 1) / blockGroups
	n := tokens * qa.blocks * blockBytes
	qa.q4Buf, qa.q4 = alignedInt8(qa.q4Buf, n)
	qa.q8Buf, qa.q8 = alignedInt8(qa.q8Buf, n)
	qa.ds = grow(qa.ds, tokens*qa.blocks*2*blockGroups)
	qa.sumQ = grow(qa.sumQ, tokens*qa.blocks*blockGroups)
}

// cacheLine aligns the quantized activations so no vector load of them
// straddles two cache lines.
const cacheLine = 64

// alignedInt8 returns a backing buffer with room for n bytes at a cacheLine
// boundary, and that n-byte window.
func alignedInt8(buf []int8, n int) (backing, window []int8) {
	if cap(buf) < n+cacheLine {
		buf = make([]int8, n+cacheLine)
	}
	buf = buf[:cap(buf)]
	off := int(-uintptr(unsafe.Pointer(&buf[0])) & (cacheLine - 1))
	return buf, buf[off : off+n : off+n]
}

func grow[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

func (qa *QActivation) quantizeToken(tok int, x []float32) {
	q4 := qa.tokenQ4(tok)
	q8 := qa.tokenQ8(tok)
	ds := qa.tokenDS(tok)
	sumQ := qa.tokenSumQ(tok)
	if !quantizeTokenAsm(x, qa.groups, q8, q4, ds, sumQ) {
		quantizeGroupsGeneric(x, qa.groups, q8, q4, ds, sumQ)
	}
	qa.zeroPadding(q8, q4, ds, sumQ)
}

// quantizeGroupsGeneric quantizes groups [0, groups) of one token into its
// slices of q8, q4, ds and sumQ: the reference for quantizeTokenAsm.
func quantizeGroupsGeneric(x []float32, groups int, q8, q4 []int8, ds []float32, sumQ []int32) {
	for g := range groups {
		xg := x[g*GroupSize : (g+1)*GroupSize : (g+1)*GroupSize]
		q8g := q8[g*GroupSize : (g+1)*GroupSize : (g+1)*GroupSize]
		ds[dsIndex(g)] = quantizeGroup(q8g, xg)
		ds[dsIndex(g)+blockGroups] = sum8(xg)
		var sq int32
		for _, v := range q8g {
			sq += int32(v)
		}
		sumQ[g] = sq
		pair, half := g/2*2*GroupSize, g%2*GroupSize/2
		for k := range GroupSize / 2 {
			q4[pair+half+k] = q8g[2*k]
			q4[pair+GroupSize+half+k] = q8g[2*k+1]
		}
	}
}

// zeroPadding zeroes one token's groups past the last, up to a whole block
// (they may hold an earlier, wider batch).
func (qa *QActivation) zeroPadding(q8, q4 []int8, ds []float32, sumQ []int32) {
	pad := qa.blocks*blockGroups - qa.groups
	if pad == 0 {
		return
	}
	clear(q8[qa.groups*GroupSize:])
	clear(sumQ[qa.groups:])
	for g := qa.groups; g < qa.blocks*blockGroups; g++ {
		ds[dsIndex(g)] = 0
		ds[dsIndex(g)+blockGroups] = 0
	}
	// A lone last group shares its pair with padding: zero the pair's B half.
	if qa.groups%2 == 1 {
		g := qa.groups
		pair, half := g/2*2*GroupSize, GroupSize/2
		clear(q4[pair+half : pair+half+GroupSize/2])
		clear(q4[pair+GroupSize+half : pair+GroupSize+half+GroupSize/2])
	}
	clear(q4[(qa.groups+1)/2*2*GroupSize:])
}

// roundMagic is 1.5·2²³: adding and subtracting it rounds a float32 of
// magnitude below 2²² to the nearest integer, ties to even.
const roundMagic = 12582912

// quantizeGroup writes round(x/dx) into q and returns dx = max|x|/127,
// rounding half to even. NaNs are left out of the maximum and quantize to 0
// (the group's Σx, and so every product with it, is NaN anyway); an infinite
// maximum gives dx = +Inf and all-zero codes; an all-zero group gives dx = 0.
func quantizeGroup(q []int8, x []float32) float32 {
	var amax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax = a
		}
	}
	dx := amax / 127
	inv := 127 / amax // +Inf for a zero group: every t below is then NaN → 0
	tiny := amax != 0 && inv > math.MaxFloat32
	for i, v := range x {
		t := float32(v * inv)
		if tiny { // max|x| below ~2⁻¹²¹: 127/max|x| overflows, divide instead
			t = v / dx
		}
		switch {
		case t > 127:
			t = 127
		case t < -127:
			t = -127
		case t != t:
			t = 0
		}
		q[i] = int8(int32(float32(t+roundMagic) - roundMagic))
	}
	return dx
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// dsIndex is where group g's dx sits in a token's ds; its Σx is blockGroups
// further.
func dsIndex(g int) int { return g/blockGroups*2*blockGroups + g%blockGroups }

func (qa *QActivation) tokenQ4(tok int) []int8 {
	n := qa.blocks * blockBytes
	return qa.q4[tok*n : (tok+1)*n]
}

func (qa *QActivation) tokenQ8(tok int) []int8 {
	n := qa.blocks * blockBytes
	return qa.q8[tok*n : (tok+1)*n]
}

func (qa *QActivation) tokenDS(tok int) []float32 {
	n := qa.blocks * 2 * blockGroups
	return qa.ds[tok*n : (tok+1)*n]
}

func (qa *QActivation) tokenSumQ(tok int) []int32 {
	n := qa.blocks * blockGroups
	return qa.sumQ[tok*n : (tok+1)*n]
}

package qwen35

import "github.com/nvmai/nvmai/pkg/kernels"

// KV cache widths (docs/kv-cache.md). The Gated DeltaNet state is float32
// whatever the width.
const (
	KVFloat32 = 32 // float32, the reference
	KVBF16    = 16 // bfloat16
	KVInt8    = 8  // int8 with one float32 scale per group of kvGroupMax values
)

// DefaultKVBits is the width the runtime and the CLIs use unless told
// otherwise. A zero StateOptions.KVBits means KVFloat32: the model package's
// own tests compare float32 against transformers.
const DefaultKVBits = KVInt8

// kvGroupMax is the int8 cache's scale group: 64 values, or the whole head
// when the head width is not a multiple of 64.
const kvGroupMax = 64

// ValidKVBits reports whether bits is a supported cache width.
func ValidKVBits(bits int) bool {
	return bits == KVFloat32 || bits == KVBF16 || bits == KVInt8
}

// kvGroup is the int8 scale group for heads of width dh.
func kvGroup(dh int) int {
	if dh%kvGroupMax == 0 {
		return kvGroupMax
	}
	return dh
}

// KVBytesPerToken is what one token costs in one full-attention layer's
// K and V at the given width.
func (c Config) KVBytesPerToken(bits int) int64 {
	row := int64(c.kvDim())
	switch bits {
	case KVBF16:
		return 2 * 2 * row
	case KVInt8:
		return 2 * (row + 4*row/int64(kvGroup(c.HeadDim)))
	}
	return 2 * 4 * row
}

// kvRows is one cache (K or V) of one layer: a row of Hkv·Dh values per
// token in the layer's width. Exactly one of f32, b16, q8 is allocated.
type kvRows struct {
	f32    []float32
	b16    []uint16
	q8     []int8
	scales []float32 // q8: one per group
}

// newKVRows allocates capacity tokens of rows of width row.
func newKVRows(bits, capacity, row, group int) kvRows {
	switch bits {
	case KVBF16:
		return kvRows{b16: make([]uint16, capacity*row)}
	case KVInt8:
		return kvRows{q8: make([]int8, capacity*row), scales: make([]float32, capacity*row/group)}
	}
	return kvRows{f32: make([]float32, capacity*row)}
}

// carry copies the first used tokens of src into r (both the same width).
func (r *kvRows) carry(src *kvRows, used, row, group int) {
	copy(r.f32, src.f32[:min(len(src.f32), used*row)])
	copy(r.b16, src.b16[:min(len(src.b16), used*row)])
	copy(r.q8, src.q8[:min(len(src.q8), used*row)])
	copy(r.scales, src.scales[:min(len(src.scales), used*row/group)])
}

// put stores the token row x [row] at position pos: rounded to bfloat16,
// or quantized per group.
func (r *kvRows) put(pos int, x []float32, group int) {
	row := len(x)
	switch {
	case r.f32 != nil:
		copy(r.f32[pos*row:(pos+1)*row], x)
	case r.b16 != nil:
		kernels.ToBF16(r.b16[pos*row:(pos+1)*row], x)
	default:
		g := row / group
		kernels.QuantizeQ8(r.q8[pos*row:(pos+1)*row], r.scales[pos*g:(pos+1)*g], x)
	}
}

// kvCache is the K and V of one full-attention layer.
type kvCache struct {
	bits int
	row  int // Hkv·Dh
	dh   int
	k, v kvRows
}

func newKVCache(bits, capacity, hkv, dh int) *kvCache {
	row, g := hkv*dh, kvGroup(dh)
	return &kvCache{bits: bits, row: row, dh: dh, k: newKVRows(bits, capacity, row, g), v: newKVRows(bits, capacity, row, g)}
}

// resized returns a cache of the given capacity holding c's first used tokens.
func (c *kvCache) resized(capacity, used int) *kvCache {
	n := &kvCache{bits: c.bits, row: c.row, dh: c.dh}
	g := kvGroup(c.dh)
	n.k, n.v = newKVRows(c.bits, capacity, c.row, g), newKVRows(c.bits, capacity, c.row, g)
	n.k.carry(&c.k, used, c.row, g)
	n.v.carry(&c.v, used, c.row, g)
	return n
}

// copyFrom copies src's first used tokens into c, which holds at least as
// many and has src's width.
func (c *kvCache) copyFrom(src *kvCache, used int) {
	g := kvGroup(c.dh)
	c.k.carry(&src.k, used, c.row, g)
	c.v.carry(&src.v, used, c.row, g)
}

// putKV stores token pos's key row (after k_norm and RoPE) and value row.
func (c *kvCache) putKV(pos int, k, v []float32) {
	g := kvGroup(c.dh)
	c.k.put(pos, k, g)
	c.v.put(pos, v, g)
}

// keyRowF32 is the float32 key row of token pos for writing in place
// (float32 caches only: k_norm and RoPE write straight into the cache).
func (c *kvCache) keyRowF32(pos int) []float32 {
	if c.f32() {
		return c.k.f32[pos*c.row : (pos+1)*c.row]
	}
	return nil
}

func (c *kvCache) f32() bool { return c.k.f32 != nil }

// scores writes (q_j·k_t)·scale for KV head g's cached keys at positions
// a … a+n−1.
func (c *kvCache) scores(scores, qs []float32, g, a, n int, scale float32, qi, scratch []float32) {
	off := a*c.row + g*c.dh
	switch {
	case c.k.f32 != nil:
		kernels.AttendScores(scores, qs, c.dh, c.k.f32[off:], c.row, n, scale, qi)
	case c.k.b16 != nil:
		kernels.AttendScoresBF16(scores, qs, c.dh, kernels.BF16Rows{Values: c.k.b16[off:], Stride: c.row}, n, scale, qi, scratch)
	default:
		gr := kvGroup(c.dh)
		kernels.AttendScoresQ8(scores, qs, c.dh, kernels.Q8Rows{Values: c.k.q8[off:], Scales: c.k.scales[off/gr:], Stride: c.row, Group: gr}, n, scale, qi, scratch)
	}
}

// values writes Σ_t w[j·n+t]·v_t over KV head g's first n cached values,
// columns c0 … c0+cw−1 of the head (c0 a multiple of the scale group) into
// o [heads, cw]. Each column's sum is the same whatever the columns asked.
func (c *kvCache) values(o, w []float32, g, c0, cw, n int, scratch []float32) {
	off := g*c.dh + c0
	switch {
	case c.v.f32 != nil:
		kernels.AttendValues(o, w, cw, c.v.f32[off:], c.row, n)
	case c.v.b16 != nil:
		kernels.AttendValuesBF16(o, w, cw, kernels.BF16Rows{Values: c.v.b16[off:], Stride: c.row}, n, scratch)
	default:
		gr := kvGroup(c.dh)
		kernels.AttendValuesQ8(o, w, cw, kernels.Q8Rows{Values: c.v.q8[off:], Scales: c.v.scales[off/gr:], Stride: c.row, Group: gr}, n, scratch)
	}
}

// scoresMulti is scores for each of several query sets over KV head g's
// first ns[i] cached keys (from position 0), each bitwise what scores gives
// it; a cache below float32 widens each tile once for all of them.
func (c *kvCache) scoresMulti(scores, qs [][]float32, g int, ns []int, scale float32, qis [][]float32, scratch []float32) {
	off := g * c.dh
	switch {
	case c.k.f32 != nil:
		for i := range qs {
			kernels.AttendScores(scores[i], qs[i], c.dh, c.k.f32[off:], c.row, ns[i], scale, qis[i])
		}
	case c.k.b16 != nil:
		kernels.AttendScoresBF16Multi(scores, qs, ns, c.dh, kernels.BF16Rows{Values: c.k.b16[off:], Stride: c.row}, scale, qis, scratch)
	default:
		gr := kvGroup(c.dh)
		kernels.AttendScoresQ8Multi(scores, qs, ns, c.dh, kernels.Q8Rows{Values: c.k.q8[off:], Scales: c.k.scales[off/gr:], Stride: c.row, Group: gr}, scale, qis, scratch)
	}
}

// valuesMulti is values (all columns of the head) for each of several
// weight sets, as scoresMulti.
func (c *kvCache) valuesMulti(os, ws [][]float32, g int, ns []int, scratch []float32) {
	off := g * c.dh
	switch {
	case c.v.f32 != nil:
		for i := range os {
			kernels.AttendValues(os[i], ws[i], c.dh, c.v.f32[off:], c.row, ns[i])
		}
	case c.v.b16 != nil:
		kernels.AttendValuesBF16Multi(os, ws, ns, c.dh, kernels.BF16Rows{Values: c.v.b16[off:], Stride: c.row}, scratch)
	default:
		gr := kvGroup(c.dh)
		kernels.AttendValuesQ8Multi(os, ws, ns, c.dh, kernels.Q8Rows{Values: c.v.q8[off:], Scales: c.v.scales[off/gr:], Stride: c.row, Group: gr}, scratch)
	}
}

// columnBlock is the width the split attention hands each thread's values:
// the int8 scale group (64, or the whole head).
func (c *kvCache) columnBlock() int { return kvGroup(c.dh) }

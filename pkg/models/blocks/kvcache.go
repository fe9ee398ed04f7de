package blocks

import (
	"math"
	"slices"

	"github.com/nvmai/nvmai/internal/lecodec"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
)

// The KV cache of one attention layer at a chosen width (docs/kv-cache.md),
// shared by qwen35 and qwen38: float32, bfloat16, or int8 with one float32
// scale per group of KVGroupMax values of a head.

// KVGroupMax is the int8 cache's scale group: 64 values, or the whole head
// when the head width is not a multiple of 64.
const KVGroupMax = 64

// KVGroup is the int8 scale group for heads of width dh.
func KVGroup(dh int) int {
	if dh%KVGroupMax == 0 {
		return KVGroupMax
	}
	return dh
}

// KVBytesPerToken is what one token costs in one layer's K and V of rows
// of row values (Hkv·Dh, heads of dh) at the given width.
func KVBytesPerToken(bits, row, dh int) int64 {
	r := int64(row)
	switch bits {
	case model.KVBF16:
		return 2 * 2 * r
	case model.KVInt8:
		return 2 * (r + 4*r/int64(KVGroup(dh)))
	}
	return 2 * 4 * r
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
	case model.KVBF16:
		return kvRows{b16: make([]uint16, capacity*row)}
	case model.KVInt8:
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

// copyRows copies rows [p0, p1) of values off…off+n−1 of each row (stride
// sRow) of src into rows at… of dst (stride dRow), in the stored width.
func (r *kvRows) copyRows(src *kvRows, at, dRow, p0, p1, sRow, off, n, group int) {
	for p := p0; p < p1; p++ {
		d, s := (at+p-p0)*dRow, p*sRow+off
		switch {
		case r.f32 != nil:
			copy(r.f32[d:d+n], src.f32[s:s+n])
		case r.b16 != nil:
			copy(r.b16[d:d+n], src.b16[s:s+n])
		default:
			copy(r.q8[d:d+n], src.q8[s:s+n])
			copy(r.scales[d/group:(d+n)/group], src.scales[s/group:(s+n)/group])
		}
	}
}

func (r *kvRows) bytes() int64 {
	return 4*int64(len(r.f32)) + 2*int64(len(r.b16)) + int64(len(r.q8)) + 4*int64(len(r.scales))
}

// parts hands each part of the first n values (the written tokens' rows)
// to the codec's function for its type: the values and, for int8, their
// scales (one per group of values).
func (r *kvRows) parts(n, group int, f32s func([]float32), u16s func([]uint16), i8s func([]int8)) {
	switch {
	case r.f32 != nil:
		f32s(r.f32[:n])
	case r.b16 != nil:
		u16s(r.b16[:n])
	default:
		i8s(r.q8[:n])
		f32s(r.scales[:n/group])
	}
}

func (r *kvRows) samePrefix(o *kvRows, values, groups int) bool {
	f32bits := func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }
	switch {
	case r.f32 != nil:
		return slices.EqualFunc(r.f32[:values], o.f32[:values], f32bits)
	case r.b16 != nil:
		return slices.Equal(r.b16[:values], o.b16[:values])
	}
	return slices.Equal(r.q8[:values], o.q8[:values]) && slices.EqualFunc(r.scales[:groups], o.scales[:groups], f32bits)
}

// KVCache is the K and V of one attention layer: per token a row of Hkv·Dh
// values each, in one width. It holds a fixed capacity of tokens; Resized
// makes a larger one.
type KVCache struct {
	bits int
	row  int // Hkv·Dh
	dh   int
	k, v kvRows
}

// NewKVCache allocates capacity tokens of hkv heads of dh values at bits
// (model.KVFloat32, KVBF16 or KVInt8).
func NewKVCache(bits, capacity, hkv, dh int) *KVCache {
	row, g := hkv*dh, KVGroup(dh)
	return &KVCache{bits: bits, row: row, dh: dh, k: newKVRows(bits, capacity, row, g), v: newKVRows(bits, capacity, row, g)}
}

// Bits is the cache's width.
func (c *KVCache) Bits() int { return c.bits }

// HeadDim is the width of one head's row.
func (c *KVCache) HeadDim() int { return c.dh }

// Capacity is the tokens the cache holds.
func (c *KVCache) Capacity() int {
	switch {
	case c.k.f32 != nil:
		return len(c.k.f32) / c.row
	case c.k.b16 != nil:
		return len(c.k.b16) / c.row
	}
	return len(c.k.q8) / c.row
}

// Resized returns a cache of the given capacity holding c's first used tokens.
func (c *KVCache) Resized(capacity, used int) *KVCache {
	n := &KVCache{bits: c.bits, row: c.row, dh: c.dh}
	g := KVGroup(c.dh)
	n.k, n.v = newKVRows(c.bits, capacity, c.row, g), newKVRows(c.bits, capacity, c.row, g)
	n.k.carry(&c.k, used, c.row, g)
	n.v.carry(&c.v, used, c.row, g)
	return n
}

// CopyFrom copies src's first used tokens into c, which holds at least as
// many and has src's width.
func (c *KVCache) CopyFrom(src *KVCache, used int) {
	g := KVGroup(c.dh)
	c.k.carry(&src.k, used, c.row, g)
	c.v.carry(&src.v, used, c.row, g)
}

// PutKV stores token pos's key row (after k_norm and RoPE) and value row.
func (c *KVCache) PutKV(pos int, k, v []float32) {
	g := KVGroup(c.dh)
	c.k.put(pos, k, g)
	c.v.put(pos, v, g)
}

// KeyRowF32 is the float32 key row of token pos for writing in place, nil
// below float32 (k_norm and RoPE write straight into a float32 cache).
func (c *KVCache) KeyRowF32(pos int) []float32 {
	if c.F32() {
		return c.k.f32[pos*c.row : (pos+1)*c.row]
	}
	return nil
}

// ValueRowF32 is KeyRowF32 for the value row.
func (c *KVCache) ValueRowF32(pos int) []float32 {
	if c.F32() {
		return c.v.f32[pos*c.row : (pos+1)*c.row]
	}
	return nil
}

// F32 reports whether the cache is float32.
func (c *KVCache) F32() bool { return c.k.f32 != nil }

// Bytes is the memory the cache holds (its capacity, not just the tokens
// written).
func (c *KVCache) Bytes() int64 { return c.k.bytes() + c.v.bytes() }

// CopyHeadRows copies KV head g's keys and values at positions [p0, p1)
// into rows at… of dst, a one-head cache of c's width and head (as
// NewKVCache(c.Bits(), n, 1, c.HeadDim()) makes), in the stored width:
// nothing is rounded again.
func (c *KVCache) CopyHeadRows(dst *KVCache, g, at, p0, p1 int) {
	gr := KVGroup(c.dh)
	dst.k.copyRows(&c.k, at, dst.row, p0, p1, c.row, g*c.dh, c.dh, gr)
	dst.v.copyRows(&c.v, at, dst.row, p0, p1, c.row, g*c.dh, c.dh, gr)
}

// SamePrefix reports whether c and o hold bitwise the same first n tokens.
func (c *KVCache) SamePrefix(o *KVCache, n int) bool {
	if c.bits != o.bits || c.row != o.row {
		return false
	}
	values := n * c.row
	groups := values / KVGroup(c.dh)
	return c.k.samePrefix(&o.k, values, groups) && c.v.samePrefix(&o.v, values, groups)
}

// WriteRows writes the first used tokens' K then V rows in the cache's
// width (int8 values followed by their scales), as their bits.
func (c *KVCache) WriteRows(cw *lecodec.Writer, used int) {
	g := KVGroup(c.dh)
	c.k.parts(used*c.row, g, cw.F32s, cw.U16s, cw.I8s)
	c.v.parts(used*c.row, g, cw.F32s, cw.U16s, cw.I8s)
}

// ReadRows reads what WriteRows wrote into the first used tokens.
func (c *KVCache) ReadRows(cr *lecodec.Reader, used int) {
	g := KVGroup(c.dh)
	c.k.parts(used*c.row, g, cr.F32s, cr.U16s, cr.I8s)
	c.v.parts(used*c.row, g, cr.F32s, cr.U16s, cr.I8s)
}

// Scores writes (q_j·k_t)·scale for KV head g's cached keys at positions
// a … a+n−1.
func (c *KVCache) Scores(scores, qs []float32, g, a, n int, scale float32, qi, scratch []float32) {
	off := a*c.row + g*c.dh
	switch {
	case c.k.f32 != nil:
		kernels.AttendScores(scores, qs, c.dh, c.k.f32[off:], c.row, n, scale, qi)
	case c.k.b16 != nil:
		kernels.AttendScoresBF16(scores, qs, c.dh, kernels.BF16Rows{Values: c.k.b16[off:], Stride: c.row}, n, scale, qi, scratch)
	default:
		gr := KVGroup(c.dh)
		kernels.AttendScoresQ8(scores, qs, c.dh, kernels.Q8Rows{Values: c.k.q8[off:], Scales: c.k.scales[off/gr:], Stride: c.row, Group: gr}, n, scale, qi, scratch)
	}
}

// Values writes Σ_t w[j·n+t]·v_t over KV head g's first n cached values,
// columns c0 … c0+cw−1 of the head (c0 a multiple of the scale group) into
// o [heads, cw]. Each column's sum is the same whatever the columns asked.
func (c *KVCache) Values(o, w []float32, g, c0, cw, n int, scratch []float32) {
	off := g*c.dh + c0
	switch {
	case c.v.f32 != nil:
		kernels.AttendValues(o, w, cw, c.v.f32[off:], c.row, n)
	case c.v.b16 != nil:
		kernels.AttendValuesBF16(o, w, cw, kernels.BF16Rows{Values: c.v.b16[off:], Stride: c.row}, n, scratch)
	default:
		gr := KVGroup(c.dh)
		kernels.AttendValuesQ8(o, w, cw, kernels.Q8Rows{Values: c.v.q8[off:], Scales: c.v.scales[off/gr:], Stride: c.row, Group: gr}, n, scratch)
	}
}

// ScoresMulti is Scores for each of several query sets over KV head g's
// first ns[i] cached keys (from position 0), each bitwise what Scores gives
// it; a cache below float32 widens each tile once for all of them.
func (c *KVCache) ScoresMulti(scores, qs [][]float32, g int, ns []int, scale float32, qis [][]float32, scratch []float32) {
	off := g * c.dh
	switch {
	case c.k.f32 != nil:
		for i := range qs {
			kernels.AttendScores(scores[i], qs[i], c.dh, c.k.f32[off:], c.row, ns[i], scale, qis[i])
		}
	case c.k.b16 != nil:
		kernels.AttendScoresBF16Multi(scores, qs, ns, c.dh, kernels.BF16Rows{Values: c.k.b16[off:], Stride: c.row}, scale, qis, scratch)
	default:
		gr := KVGroup(c.dh)
		kernels.AttendScoresQ8Multi(scores, qs, ns, c.dh, kernels.Q8Rows{Values: c.k.q8[off:], Scales: c.k.scales[off/gr:], Stride: c.row, Group: gr}, scale, qis, scratch)
	}
}

// ValuesMulti is Values (all columns of the head) for each of several
// weight sets, as ScoresMulti.
func (c *KVCache) ValuesMulti(os, ws [][]float32, g int, ns []int, scratch []float32) {
	off := g * c.dh
	switch {
	case c.v.f32 != nil:
		for i := range os {
			kernels.AttendValues(os[i], ws[i], c.dh, c.v.f32[off:], c.row, ns[i])
		}
	case c.v.b16 != nil:
		kernels.AttendValuesBF16Multi(os, ws, ns, c.dh, kernels.BF16Rows{Values: c.v.b16[off:], Stride: c.row}, scratch)
	default:
		gr := KVGroup(c.dh)
		kernels.AttendValuesQ8Multi(os, ws, ns, c.dh, kernels.Q8Rows{Values: c.v.q8[off:], Scales: c.v.scales[off/gr:], Stride: c.row, Group: gr}, scratch)
	}
}

// ColumnBlock is the width a split attention hands each thread's values:
// the int8 scale group (64, or the whole head).
func (c *KVCache) ColumnBlock() int { return KVGroup(c.dh) }

// TileScratch is the kernels.AttendScratch a reader of heads query heads
// needs over this cache, grown in buf; nil for a float32 cache.
func (c *KVCache) TileScratch(buf *[]float32, heads int) []float32 {
	if c.F32() {
		return nil
	}
	return Grow(buf, kernels.AttendScratch(heads, c.dh))
}

// DefaultKVInitial is the KV capacity in tokens a sequence starts with:
// small enough that a short chat does not reserve the whole context, large
// enough that growth (a doubling copy) is rare.
const DefaultKVInitial = 8192

// GrownKVCapacity is the capacity a cache of capacity cur grows to so as
// to hold need tokens: doubled until it does, at most maxContext.
func GrownKVCapacity(cur, need, maxContext int) int {
	c := max(cur, 1)
	for c < need {
		c *= 2
	}
	return min(c, maxContext)
}

// PreviousKVCapacity is the KV capacity before the last doubling that
// reaches ctx from DefaultKVInitial (0 when no growth is needed): what the
// old cache holds while the last growth copies it.
func PreviousKVCapacity(ctx int) int {
	c := DefaultKVInitial
	if ctx <= c {
		return 0
	}
	for 2*c < ctx {
		c *= 2
	}
	return c
}

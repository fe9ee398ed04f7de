package gpukernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	kvblocks "github.com/nvmai/nvmai/pkg/models/blocks"
)

// The KV cache below float32 (docs/kv-cache.md): attn_kv_q8 / attn_kv_bf16
// must store exactly the CPU engine's bytes (kernels.QuantizeQ8,
// kernels.ToBF16 of the row the float32 cache holds), and the attention
// kernels must read them as the CPU engine widens them.

// attnShapes covers the release head (256: four scale groups of 64), a
// head of 128 (two), and the tiny fixtures' 32 (the group is the head),
// with grouped queries.
var attnShapes = []AttnShape{{Hq: 16, Hkv: 2, Dh: 256, Half: 32}, {Hq: 4, Hkv: 1, Dh: 128, Half: 16}, {Hq: 4, Hkv: 2, Dh: 32, Half: 4}}

// kvHostCache is a cache read back from the device, in its width.
type kvHostCache struct {
	f32        []float32
	b16        []uint16
	q8         []int8
	scales     []float32
	kvd, group int
}

func (h *kvHostCache) row(p int) string {
	switch {
	case h.b16 != nil:
		return fmt.Sprint(h.b16[p*h.kvd : (p+1)*h.kvd])
	case h.q8 != nil:
		g := h.kvd / h.group
		return fmt.Sprint(h.q8[p*h.kvd:(p+1)*h.kvd], h.scales[p*g:(p+1)*g])
	}
	return fmt.Sprint(h.f32[p*h.kvd : (p+1)*h.kvd])
}

// widened is row p as float32, as kernels.widenQ8 / widenBF16 give it
// (float32(q)·scale, one rounded multiply; bfloat16 exactly).
func (h *kvHostCache) widened(p int) []float32 {
	out := make([]float32, h.kvd)
	for i := range out {
		switch {
		case h.b16 != nil:
			out[i] = math.Float32frombits(uint32(h.b16[p*h.kvd+i]) << 16)
		case h.q8 != nil:
			out[i] = float32(h.q8[p*h.kvd+i]) * h.scales[(p*h.kvd+i)/h.group]
		default:
			out[i] = h.f32[p*h.kvd+i]
		}
	}
	return out
}

// devKV allocates a cache of capacity rows at bits, poisoned.
func devKV(b *gpuBuf, bits, capacity, kvd, dh int) KVCache {
	values, scales := KVRowBytes(bits, kvd, dh)
	kv := KVCache{Bits: bits, K: b.poisoned(int(values) * capacity), V: b.poisoned(int(values) * capacity)}
	if scales > 0 {
		kv.KS, kv.VS = b.poisoned(int(scales)*capacity), b.poisoned(int(scales)*capacity)
	}
	return kv
}

// readKV copies a cache's first rows back (K, then V).
func readKV(t *testing.T, b *gpuBuf, kv KVCache, rows, kvd, dh int) (k, v *kvHostCache) {
	t.Helper()
	read := func(vals, sc cuda.DevicePtr) *kvHostCache {
		h := &kvHostCache{kvd: kvd, group: KVGroup(dh)}
		var dst []byte
		switch kv.Bits {
		case model.KVBF16:
			h.b16 = make([]uint16, rows*kvd)
			dst = cuda.Bytes(h.b16)
		case model.KVInt8:
			h.q8, h.scales = make([]int8, rows*kvd), make([]float32, rows*kvd/h.group)
			dst = cuda.Bytes(h.q8)
			if err := b.c.DtoH(cuda.Bytes(h.scales), sc); err != nil {
				t.Fatal(err)
			}
		default:
			h.f32 = make([]float32, rows*kvd)
			dst = cuda.Bytes(h.f32)
		}
		if err := b.c.DtoH(dst, vals); err != nil {
			t.Fatal(err)
		}
		return h
	}
	return read(kv.K, kv.KS), read(kv.V, kv.VS)
}

// cpuRow is the CPU engine's stored row (blocks.KVCache.PutKV) of x at
// bits, as kvHostCache.row prints it.
func cpuRow(x []float32, bits, dh int) string {
	h := &kvHostCache{kvd: len(x), group: KVGroup(dh)}
	switch bits {
	case model.KVBF16:
		h.b16 = make([]uint16, len(x))
		kernels.ToBF16(h.b16, x)
	case model.KVInt8:
		h.q8, h.scales = make([]int8, len(x)), make([]float32, len(x)/h.group)
		kernels.QuantizeQ8(h.q8, h.scales, x)
	default:
		h.f32 = x
	}
	return h.row(0)
}

// edgeValues overwrites v's first token with rows that probe the rounding:
// a group of zeros, quantization ties (a group whose scale is exactly 1, so
// x/scale = k+½ exactly: away from zero), values at bfloat16's ties (to
// even) and its largest finite values, and negative zeros.
func edgeValues(v []float32, dh int) {
	g := KVGroup(dh)
	row := v[:min(len(v), 2*dh)]
	clear(row[:g]) // zeros (head 0, group 0)
	if len(row) >= 2*g {
		tie := row[g : 2*g]
		for i := range tie {
			tie[i] = float32(i%64) - 31.5 // −31.5 … 31.5
		}
		tie[0] = 127 // the scale is 127/127 = 1
		tie[1] = -0.0
	}
	for i := 2 * g; i < len(row); i++ {
		switch i % 4 {
		case 0:
			row[i] = math.Float32frombits(0x3f808000) // halfway between two bfloat16s, lower even
		case 1:
			row[i] = math.Float32frombits(0x3f818000) // halfway, lower odd
		case 2:
			row[i] = math.Float32frombits(0x7f7fffff) // rounds to +Inf in bfloat16
		default:
			row[i] = -math.Float32frombits(0x00000001) // a subnormal
		}
	}
}

// attn_kv at 8 and 16 bits writes, for every token of a chunk, bytes equal
// to the CPU engine's quantization of the rows the float32 cache holds:
// the key after k_norm and RoPE (attn_kv at 32 bits on the same input),
// the value as given; int8 scales bit for bit.
func TestAttnKVStoresTheCPUEnginesRows(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for _, s := range attnShapes {
		for _, bits := range []int{model.KVInt8, model.KVBF16} {
			t.Run(fmt.Sprintf("Dh%d/Hkv%d/%dbit", s.Dh, s.Hkv, bits), func(t *testing.T) {
				const T, pos0, capacity = 7, 3, 16
				kvd := s.Hkv * s.Dh
				k, v := randVec(r, T*kvd, 1.5), randVec(r, T*kvd, 0.8)
				edgeValues(v, s.Dh)
				kNorm := randVec(r, s.Dh, 1)
				inv := make([]float32, s.Half)
				for j := range inv {
					inv[j] = float32(1 / math.Pow(1e7, float64(2*j)/float64(2*s.Half)))
				}
				withGPU(t, func(b *gpuBuf, l *Launcher) {
					pos := b.up(cuda.Bytes([]int32{pos0}))
					dk, dv, dn, di := b.up(cuda.Bytes(k)), b.up(cuda.Bytes(v)), b.up(cuda.Bytes(kNorm)), b.up(cuda.Bytes(inv))
					ref, narrow := devKV(b, 32, capacity, kvd, s.Dh), devKV(b, bits, capacity, kvd, s.Dh)
					for _, kv := range []KVCache{ref, narrow} {
						if err := l.AttnKV(kv, dk, dv, dn, di, pos, s, 1e-6, T); err != nil {
							t.Fatal(err)
						}
					}
					if err := b.c.Sync(); err != nil {
						t.Fatal(err)
					}
					rk, _ := readKV(t, b, ref, capacity, kvd, s.Dh)
					gk, gv := readKV(t, b, narrow, capacity, kvd, s.Dh)
					for tok := range T {
						p := pos0 + tok
						if want, got := cpuRow(rk.widened(p), bits, s.Dh), gk.row(p); got != want {
							t.Fatalf("token %d: key row\n got %s\nwant %s (the CPU engine's)", tok, got, want)
						}
						if want, got := cpuRow(v[tok*kvd:(tok+1)*kvd], bits, s.Dh), gv.row(p); got != want {
							t.Fatalf("token %d: value row\n got %s\nwant %s (the CPU engine's)", tok, got, want)
						}
					}
				})
			})
		}
	}
}

// attnInputs is one chunk's attention inputs.
type attnInputs struct {
	s        AttnShape
	q2       []float32 // [T, Hq·2·Dh]
	qNorm    []float32
	invFreq  []float32
	pos0, T  int
	capacity int
}

func newAttnInputs(r *rand.Rand, s AttnShape, pos0, T, capacity int) attnInputs {
	in := attnInputs{s: s, q2: randVec(r, T*2*s.Hq*s.Dh, 1), qNorm: randVec(r, s.Dh, 1), pos0: pos0, T: T, capacity: capacity}
	in.invFreq = make([]float32, s.Half)
	for j := range in.invFreq {
		in.invFreq[j] = float32(1 / math.Pow(1e7, float64(2*j)/float64(2*s.Half)))
	}
	return in
}

// run is AttnHeads over kv on the device: the output [T, Hq·Dh].
func (in attnInputs) run(t *testing.T, b *gpuBuf, l *Launcher, kv KVCache) []float32 {
	t.Helper()
	s := in.s
	o := b.poisoned(4 * in.T * s.Hq * s.Dh)
	scores := b.poisoned(4 * in.T * s.Hq * in.capacity)
	pos := b.up(cuda.Bytes([]int32{int32(in.pos0)}))
	if err := l.AttnHeads(o, scores, b.up(cuda.Bytes(in.q2)), kv, b.up(cuda.Bytes(in.qNorm)), b.up(cuda.Bytes(in.invFreq)), pos, s, 1e-6, in.capacity, in.T); err != nil {
		t.Fatal(err)
	}
	if err := b.c.Sync(); err != nil {
		t.Fatal(err)
	}
	return b.f32(o, in.T*s.Hq*s.Dh)
}

// cpu is the CPU engine's attention over the cache k, v (qwen35 attnHeads:
// the query normed and rotated, blocks.KVCache.Scores / Values through
// kernels.AttendScores{,Q8,BF16} and AttendValues{,Q8,BF16},
// blocks.SoftmaxInPlace, the sigmoid gate).
func (in attnInputs) cpu(k, v *kvHostCache) []float32 {
	s := in.s
	Dh, group := s.Dh, s.Hq/s.Hkv
	out := make([]float32, in.T*s.Hq*Dh)
	scale := float32(1 / math.Sqrt(float64(Dh)))
	cos, sin := make([]float32, s.Half), make([]float32, s.Half)
	for t := range in.T {
		p := in.pos0 + t
		n := p + 1
		for j := range s.Half {
			angle := float32(p) * in.invFreq[j]
			cos[j], sin[j] = float32(math.Cos(float64(angle))), float32(math.Sin(float64(angle)))
		}
		for g := range s.Hkv {
			qs := make([]float32, group*Dh)
			for j := range group {
				h := g*group + j
				q := qs[j*Dh : (j+1)*Dh]
				kvblocks.RMSNorm(q, in.q2[t*2*s.Hq*Dh+h*2*Dh:][:Dh], in.qNorm, 1e-6)
				kvblocks.Rotate(q, cos, sin)
			}
			scores, qi := make([]float32, group*n), make([]float32, group*Dh)
			o := out[t*s.Hq*Dh+g*group*Dh:][:group*Dh]
			tile := make([]float32, kernels.AttendScratch(group, Dh))
			off := g * Dh
			switch {
			case k.q8 != nil:
				kernels.AttendScoresQ8(scores, qs, Dh, kernels.Q8Rows{Values: k.q8[off:], Scales: k.scales[off/k.group:], Stride: k.kvd, Group: k.group}, n, scale, qi, tile)
			case k.b16 != nil:
				kernels.AttendScoresBF16(scores, qs, Dh, kernels.BF16Rows{Values: k.b16[off:], Stride: k.kvd}, n, scale, qi, tile)
			default:
				kernels.AttendScores(scores, qs, Dh, k.f32[off:], k.kvd, n, scale, qi)
			}
			for j := range group {
				kvblocks.SoftmaxInPlace(scores[j*n : (j+1)*n])
			}
			switch {
			case v.q8 != nil:
				kernels.AttendValuesQ8(o, scores, Dh, kernels.Q8Rows{Values: v.q8[off:], Scales: v.scales[off/v.group:], Stride: v.kvd, Group: v.group}, n, tile)
			case v.b16 != nil:
				kernels.AttendValuesBF16(o, scores, Dh, kernels.BF16Rows{Values: v.b16[off:], Stride: v.kvd}, n, tile)
			default:
				kernels.AttendValues(o, scores, Dh, v.f32[off:], v.kvd, n)
			}
			for j := range group {
				h := g*group + j
				kernels.MulSigmoid(o[j*Dh:(j+1)*Dh], in.q2[t*2*s.Hq*Dh+h*2*Dh+Dh:][:Dh])
			}
		}
	}
	return out
}

// randomNarrowCache fills rows [0, rows) of a host cache at bits as a
// stored cache holds them: the CPU engine's quantization of random rows.
func randomNarrowCache(r *rand.Rand, bits, rows, kvd, dh int) *kvHostCache {
	h := &kvHostCache{kvd: kvd, group: KVGroup(dh)}
	x := randVec(r, rows*kvd, 1)
	switch bits {
	case model.KVBF16:
		h.b16 = make([]uint16, rows*kvd)
		kernels.ToBF16(h.b16, x)
	case model.KVInt8:
		h.q8, h.scales = make([]int8, rows*kvd), make([]float32, rows*kvd/h.group)
		kernels.QuantizeQ8(h.q8, h.scales, x)
	default:
		h.f32 = x
	}
	return h
}

// upKV uploads host caches into a device cache of their width.
func upKV(b *gpuBuf, k, v *kvHostCache, bits int) KVCache {
	up := func(h *kvHostCache) (cuda.DevicePtr, cuda.DevicePtr) {
		switch {
		case h.b16 != nil:
			return b.up(cuda.Bytes(h.b16)), 0
		case h.q8 != nil:
			return b.up(cuda.Bytes(h.q8)), b.up(cuda.Bytes(h.scales))
		}
		return b.up(cuda.Bytes(h.f32)), 0
	}
	kv := KVCache{Bits: bits}
	kv.K, kv.KS = up(k)
	kv.V, kv.VS = up(v)
	return kv
}

func widenAll(h *kvHostCache, rows int) *kvHostCache {
	w := &kvHostCache{kvd: h.kvd, group: h.group, f32: make([]float32, 0, rows*h.kvd)}
	for p := range rows {
		w.f32 = append(w.f32, h.widened(p)...)
	}
	return w
}

// Attention over an 8- or 16-bit cache (decode: one token; prefill: a
// chunk; and a context past the kernel's shared-memory weights, 10,240
// positions) is bitwise the float32 kernels over the rows widened as the
// CPU engine widens them: the narrow cache changes nothing but the values
// read. Against the CPU engine's own attention (kernels.AttendScoresQ8 …)
// it agrees as the float32 path does (the norms' and softmax's float64
// sums are ordered differently): the relative error of each width is
// bounded by 1e-5 and logged beside the float32 path's.
func TestAttnHeadsNarrowCacheIsTheCPUEnginesWidening(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	for _, s := range attnShapes {
		for _, c := range []struct {
			name    string
			pos0, T int
		}{{"decode", 37, 1}, {"prefill", 5, 24}, {"long", 10300, 2}} {
			if c.name == "long" && s.Dh != 256 {
				continue
			}
			capacity := c.pos0 + c.T + 3
			kvd := s.Hkv * s.Dh
			in := newAttnInputs(r, s, c.pos0, c.T, capacity)
			var errs []string
			for _, bits := range []int{model.KVInt8, model.KVBF16, model.KVFloat32} {
				t.Run(fmt.Sprintf("Dh%d/%s/%dbit", s.Dh, c.name, bits), func(t *testing.T) {
					k, v := randomNarrowCache(r, bits, capacity, kvd, s.Dh), randomNarrowCache(r, bits, capacity, kvd, s.Dh)
					withGPU(t, func(b *gpuBuf, l *Launcher) {
						got := in.run(t, b, l, upKV(b, k, v, bits))
						if bits != model.KVFloat32 {
							wk, wv := widenAll(k, capacity), widenAll(v, capacity)
							if want := in.run(t, b, l, upKV(b, wk, wv, model.KVFloat32)); !slices.EqualFunc(got, want, func(a, b float32) bool {
								return math.Float32bits(a) == math.Float32bits(b)
							}) {
								t.Fatalf("%d-bit attention differs from float32 attention over the widened rows (max |Δ| %g)", bits, maxDiff(got, want))
							}
						}
						want := in.cpu(k, v)
						rel := relDiff(got, want)
						equal := 0
						for i := range got {
							if math.Float32bits(got[i]) == math.Float32bits(want[i]) {
								equal++
							}
						}
						errs = append(errs, fmt.Sprintf("%d-bit %.2e (%d of %d values bitwise)", bits, rel, equal, len(got)))
						if rel > 1e-5 {
							t.Fatalf("%d-bit attention: relative error %.2e against the CPU engine's", bits, rel)
						}
					})
				})
			}
			t.Logf("Dh %d %s: relative error against the CPU engine's attention: %v", s.Dh, c.name, errs)
		}
	}
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func relDiff(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

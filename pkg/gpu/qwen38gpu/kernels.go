package qwen38gpu

import (
	_ "embed"
	"fmt"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
)

// ownSource is the kernels only qwen4_exp needs.
//
//go:embed kernels.cu
var ownSource string

// Source is what the second module compiles: gpukernels' source (whose
// helpers and attention kernels the new kernels use) followed by this
// package's. The cubin cache keys it like the first module.
func Source() string { return gpukernels.Source + "\n" + ownSource }

// Names lists the kernels of this package's source, and those of
// gpukernels' it launches from the second module (the attention's scores
// and values, split around q38_qsa_mask).
var Names = []string{"q38_rep", "q38_gnorm", "q38_hc_act", "q38_hc_mean", "q38_hc_wgate", "q38_hc_write", "q38_ple_gate",
	"q38_ple_conv", "q38_gdn_heads", "q38_gdn_norm", "q38_idx_kraw", "q38_idx_blocks", "q38_idx_scores", "q38_idx_select",
	"q38_qsa_mask", "q38_zero",
	"attn_scores", "attn_values", "attn_scores_q8", "attn_values_q8", "attn_scores_bf16", "attn_values_bf16"}

// Kernels is the second module: the qwen4_exp kernels.
type Kernels struct {
	f map[string]*cuda.Function
}

// LoadKernels compiles (or reads from the cubin cache) and loads the module.
func LoadKernels(c *cuda.Ctx) (*Kernels, error) {
	m, err := c.LoadSource(Source(), "nvmai_qwen38.cu")
	if err != nil {
		return nil, err
	}
	k := &Kernels{f: map[string]*cuda.Function{}}
	for _, n := range Names {
		f, err := c.Func(m, n)
		if err != nil {
			return nil, err
		}
		k.f[n] = f
	}
	if err := c.SetMaxDynamicShared(k.f["q38_gdn_heads"], gpukernels.MaxGDNShared); err != nil {
		return nil, err
	}
	return k, nil
}

// Launcher launches the module's kernels on c's stream, counting them.
type Launcher struct {
	C     *cuda.Ctx
	K     *Kernels
	Count int
}

func (l *Launcher) launch(name string, grid, block cuda.Dim3, smem int, args ...any) error {
	l.Count++
	return l.C.Launch(l.K.f[name], grid, block, smem, args...)
}

func nblocks(n, per int) int { return (n + per - 1) / per }

// Rep writes the embedding x [T, H] into every stream of R [T, S·H].
func (l *Launcher) Rep(R, x cuda.DevicePtr, H, S, T int) error {
	return l.launch("q38_rep", cuda.D2(nblocks(H, 256), T), cuda.D1(256), 0, R, x, H, S)
}

// GroupedNorm is the grouped RMSNorm of rows [T, S·H] (scale [S·H], 1 + w).
func (l *Launcher) GroupedNorm(out, x, scale cuda.DevicePtr, H, S, T int, eps float32) error {
	return l.launch("q38_gnorm", cuda.D2(S, T), cuda.D1(256), 0, out, x, scale, H, S, eps)
}

// HCAct does a = silu(a/S) over n values.
func (l *Launcher) HCAct(a cuda.DevicePtr, n, S int) error {
	return l.launch("q38_hc_act", cuda.D1(nblocks(n, 256)), cuda.D1(256), 0, a, n, float32(S))
}

// HCMean writes x [T, H], the mean over streams of sigmoid(m)·rn.
func (l *Launcher) HCMean(x, m, rn cuda.DevicePtr, H, S, T int) error {
	return l.launch("q38_hc_mean", cuda.D2(nblocks(H, 256), T), cuda.D1(256), 0, x, m, rn, H, S)
}

// HCWriteGates does c = 2·sigmoid(c/S) over n values.
func (l *Launcher) HCWriteGates(c cuda.DevicePtr, n, S int) error {
	return l.launch("q38_hc_wgate", cuda.D1(nblocks(n, 256)), cuda.D1(256), 0, c, n, float32(S))
}

// HCWrite adds c ⊗ y to R.
func (l *Launcher) HCWrite(R, c, y cuda.DevicePtr, H, S, T int) error {
	return l.launch("q38_hc_write", cuda.D2(nblocks(H, 256), T), cuda.D1(256), 0, R, c, y, H, S)
}

// PLEGate writes u [T, S·H], each stream sigmoid(ssqrt(kn_s·qn_s/√H))·v.
func (l *Launcher) PLEGate(u, kn, qn, v cuda.DevicePtr, H, S, T int, sqrtH float32) error {
	return l.launch("q38_ple_gate", cuda.D2(S, T), cuda.D1(256), 0, u, kn, qn, v, H, S, sqrtH)
}

// PLEConv adds u + silu(dilated conv of un) to R, advancing state.
func (l *Launcher) PLEConv(R, u, un, state, w cuda.DevicePtr, C, Kp, N, T int) error {
	return l.launch("q38_ple_conv", cuda.D1(nblocks(C, 128)), cuda.D1(128), 0, R, u, un, state, w, C, Kp, N, T)
}

// GDNHeads is gpukernels.GDNHeads with the sigmoid output gate.
func (l *Launcher) GDNHeads(o, S, conv, z, a, b, negExpA, dtBias, normW cuda.DevicePtr, s gpukernels.GDNShape, eps float32, T, abStride int) error {
	threads := max(96, (s.Dv+31)/32*32)
	smem := (2*s.Dk + s.Dv + s.Dk*s.Dv) * 4
	if smem > gpukernels.MaxGDNShared {
		return fmt.Errorf("qwen38gpu: a %d×%d delta-rule state (%d bytes) is past the %d bytes of shared memory q38_gdn_heads asks for", s.Dk, s.Dv, smem, gpukernels.MaxGDNShared)
	}
	return l.launch("q38_gdn_heads", cuda.D1(s.Hv), cuda.D1(threads), smem,
		o, S, conv, z, a, b, negExpA, dtBias, normW, s.C, s.Hk, s.Hv, s.Dk, s.Dv, eps, T, abStride)
}

// GDNNorm is the sigmoid-gated norm over gdn_rec's raw outputs.
func (l *Launcher) GDNNorm(o, oraw, z, normW cuda.DevicePtr, s gpukernels.GDNShape, eps float32, T int) error {
	return l.launch("q38_gdn_norm", cuda.D2(s.Hv, T), cuda.D1(min(1024, max(64, (s.Dv+31)/32*32))), 0, o, oraw, z, normW, s.Hv, s.Dv, eps)
}

// IndexerShape is the QSA indexer's geometry.
type IndexerShape struct {
	Heads, Dim, Half, Block, Keep int // nih, dih, rd/2, cr, B = budget/cr
}

// The indexer's launchers take the pass's first position in device memory
// (pos: an int32, the state's dpos), so a decode step's launches do not
// change with the position and replay as one CUDA graph.

// IndexerKeys caches the chunk's raw indexer keys at rows pos… of kraw.
func (l *Launcher) IndexerKeys(kraw, qk cuda.DevicePtr, s IndexerShape, pos cuda.DevicePtr, T int) error {
	return l.launch("q38_idx_kraw", cuda.D1(T), cuda.D1(128), 0, kraw, qk, (s.Heads+1)*s.Dim, s.Dim, pos)
}

// IndexerBlocks computes the block keys a pass of T tokens from pos
// completes: pos/cr … (pos+T)/cr − 1 (none for most decode steps: the
// launch's blocks return at once).
func (l *Launcher) IndexerBlocks(kb, kraw, kNorm, invFreq cuda.DevicePtr, s IndexerShape, pos cuda.DevicePtr, T int, eps float32) error {
	return l.launch("q38_idx_blocks", cuda.D1(T/s.Block+1), cuda.D1(128), 4*s.Dim, kb, kraw, kNorm, invFreq, s.Dim, s.Half, s.Block, pos, T, eps)
}

// IndexerScores writes the block scores [T, nbMax] of the chunk's tokens
// past the dense window.
func (l *Launcher) IndexerScores(scores, qk, qNorm, kb, invFreq cuda.DevicePtr, s IndexerShape, nbMax int, pos cuda.DevicePtr, T int, eps, scale float32) error {
	return l.launch("q38_idx_scores", cuda.D1(T), cuda.D1(256), 4*s.Heads*s.Dim, scores, qk, qNorm, kb, invFreq,
		(s.Heads+1)*s.Dim, s.Heads, s.Dim, s.Half, s.Block, s.Keep, nbMax, pos, eps, scale)
}

// IndexerSelect marks keep [T, nbMax] with each sparse token's B best blocks.
func (l *Launcher) IndexerSelect(keep, scores cuda.DevicePtr, s IndexerShape, nbMax int, pos cuda.DevicePtr, T int) error {
	return l.launch("q38_idx_select", cuda.D1(T), cuda.D1(256), 0, keep, scores, s.Block, s.Keep, nbMax, pos)
}

// Zero clears n floats on the stream.
func (l *Launcher) Zero(x cuda.DevicePtr, n int) error {
	return l.launch("q38_zero", cuda.D1(nblocks(n, 256)), cuda.D1(256), 0, x, n)
}

// attnSlices is gpukernels' attnSlices: blocks sharing one head's scores.
const attnSlices = 8

// SparseAttention is gpukernels.AttnHeads with the indexer's selection
// between its two halves: the scores of every visible key, the keys of
// unkept blocks masked (q38_qsa_mask), then the softmax, values and gate.
// Launched from this module's copy of gpukernels' kernels, with
// gpukernels.AttnHeads' arguments.
func (l *Launcher) SparseAttention(o, scores, q2 cuda.DevicePtr, kv gpukernels.KVCache, qNorm, invFreq, pos cuda.DevicePtr,
	s gpukernels.AttnShape, eps float32, capacity, T int, keep cuda.DevicePtr, is IndexerShape, nbMax int) error {
	sGrid, sBlock := cuda.Dim3{X: uint32(s.Hq), Y: uint32(T), Z: attnSlices}, cuda.D1(256)
	vGrid, vBlock := cuda.Dim3{X: uint32(s.Hq), Y: uint32(T), Z: uint32(nblocks(s.Dh, 64))}, cuda.D1(64)
	mask := func() error {
		return l.launch("q38_qsa_mask", cuda.D2(s.Hq, T), cuda.D1(256), 0, scores, keep, s.Hq, capacity, is.Block, is.Keep, nbMax, pos)
	}
	var err error
	switch kv.Bits {
	case model.KVFloat32:
		if err = l.launch("attn_scores", sGrid, sBlock, s.Dh*4, scores, q2, kv.K, qNorm, invFreq, pos, s.Hq, s.Hkv, s.Dh, s.Half, eps, capacity); err == nil {
			if err = mask(); err == nil {
				err = l.launch("attn_values", vGrid, vBlock, 0, o, scores, q2, kv.V, pos, s.Hq, s.Hkv, s.Dh, capacity)
			}
		}
	case model.KVBF16:
		if err = l.launch("attn_scores_bf16", sGrid, sBlock, s.Dh*4, scores, q2, kv.K, qNorm, invFreq, pos, s.Hq, s.Hkv, s.Dh, s.Half, eps, capacity); err == nil {
			if err = mask(); err == nil {
				err = l.launch("attn_values_bf16", vGrid, vBlock, 0, o, scores, q2, kv.V, pos, s.Hq, s.Hkv, s.Dh, capacity)
			}
		}
	case model.KVInt8:
		g := gpukernels.KVGroup(s.Dh)
		if err = l.launch("attn_scores_q8", sGrid, sBlock, s.Dh*4, scores, q2, kv.K, kv.KS, qNorm, invFreq, pos, s.Hq, s.Hkv, s.Dh, s.Half, eps, capacity, g); err == nil {
			if err = mask(); err == nil {
				err = l.launch("attn_values_q8", vGrid, vBlock, 0, o, scores, q2, kv.V, kv.VS, pos, s.Hq, s.Hkv, s.Dh, capacity, g)
			}
		}
	default:
		err = fmt.Errorf("qwen38gpu: attention over a KV cache of %d bits; want 8, 16 or 32", kv.Bits)
	}
	return err
}

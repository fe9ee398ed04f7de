package qwen35

import (
	"slices"

	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// Prefill scheduling (docs/prefill.md). A pass of T tokens through the
// layers hands each MoE layer its T tokens grouped by expert (runExperts),
// so every routed expert is fetched at most once per pass. When the expert
// cache cannot hold every expert, a pass reads nearly every expert of every
// layer from disk whatever T is, so the disk bytes per prompt token fall as
// 1/T: a long prompt is best prefilled in as few, as long passes as the
// scratch memory allows. Any split of a prompt gives bitwise the same
// logits and state (TestChunkingIsBitwiseInvisible), so the pass length is
// free to choose.

// DefaultPrefillChunk is the pass length without a scratch budget, and
// the shortest PrefillChunk picks.
const DefaultPrefillChunk = 256

// PrefillScratchBudget is the least activation scratch of one long pass
// (ScratchBytesPerToken × pass length) when PrefillChunk lengthens passes;
// PassScratchBudget grants more beside a large expert cache.
const PrefillScratchBudget = 384 << 20

// PassScratchBudget is the scratch a long pass may take beside an expert
// cache of expertBytes: an eighth of it, at least PrefillScratchBudget.
// Passes twice as long read each streamed expert half as often: on the
// 40-layer 8-bit install under an 8 GiB budget a 4,096-token prompt in one
// pass instead of two read 31.9 instead of 55.8 GiB and prefilled 1.03–1.10×
// faster (docs/prefill.md), for ~180 MiB more peak RSS; a budget of an
// eighth keeps that memory small beside what the user gave the cache.
func PassScratchBudget(expertBytes int64) int64 {
	return max(PrefillScratchBudget, expertBytes/8)
}

// ScratchBytesPerToken is an upper bound on the scratch one token of a
// pass adds to a State's workspace: the residual stream and its norms, the
// RoPE tables, the FFN's [T, …] buffers, the routed expert outputs
// [T, k, H] and the int8 activations the kernels quantize. The mixers'
// buffers stop growing at mixRows tokens (MixerScratchBytes). It excludes
// the KV cache (which holds the prompt whatever the pass length) and the
// caller's logits.
func (c Config) ScratchBytesPerToken() int64 {
	H := c.HiddenSize
	floats := 3*H + c.RotaryDim + H // x, u, mix; cos and sin; final norm
	widest := H
	switch c.Arch {
	case ArchMoE:
		k := c.ExpertsPerToken
		// gate and up (one expert's rows, at most T), shared gate and up,
		// router logits, weights and sharedGate, routed, an expert's
		// gathered inputs, rowOf (int32s, within the 2·H kept from when an
		// expert's outputs had their own buffer), sel (ints) and users
		// (pairs of ints).
		floats += 2*c.ExpertIntermediate + 2*c.SharedIntermediate + c.NumExperts + k + 1 + k*H + 2*H + 2*k + 4*k
		widest = max(widest, c.ExpertIntermediate, c.SharedIntermediate)
	case ArchDense:
		floats += 2 * c.Intermediate
		widest = max(widest, c.Intermediate)
	}
	// int8 activations and their scales: one byte per input column, for
	// the widest input, twice over (a job may quantize two inputs).
	return 4*int64(floats) + 2*int64(widest)
}

// MixerScratchBytes bounds the mixers' [T, …] buffers, which stop growing
// at mixRows tokens.
func (c Config) MixerScratchBytes() int64 {
	var floats int
	if slices.Contains(c.Layers, LinearAttention) { // proj, conv, z, o, a, b
		floats += 2*c.ConvChannels() + 2*c.valueDim() + 2*c.LinearValueHeads
	}
	if slices.Contains(c.Layers, FullAttention) { // q and gate, k, v, o
		floats += 3*c.NumHeads*c.HeadDim + 2*c.kvDim()
	}
	widest := max(c.NumHeads*c.HeadDim, c.valueDim(), c.ConvChannels())
	return mixRows * (4*int64(floats) + 2*int64(widest))
}

// PrefillChunk is the pass length for prefilling tokens prompt tokens: as
// long as scratch bytes of pass scratch allow (PrefillScratchBudget with
// every expert resident, PassScratchBudget when experts stream; never below
// DefaultPrefillChunk, which scratch 0 also gives), the prompt split into
// passes of equal length (the last may be one shorter), so no short tail
// pass re-reads every expert for a few tokens.
func (c Config) PrefillChunk(tokens int, scratch int64) int {
	if scratch <= 0 || tokens <= DefaultPrefillChunk {
		return DefaultPrefillChunk
	}
	longest := max(int((scratch-c.MixerScratchBytes())/c.ScratchBytesPerToken()), DefaultPrefillChunk)
	passes := (tokens + longest - 1) / longest
	return (tokens + passes - 1) / passes
}

// mixRows is the most tokens a layer's mixer (Gated DeltaNet or attention)
// runs at once. A mixer gains nothing from a longer pass — its weights are
// resident and it walks its tokens one by one — while its [T, …] buffers,
// a third of a pass's scratch, fall out of cache: 1024-token passes
// computed about 20% slower per token than 256-token ones
// (scripts/prefill-ab.sh) until the mixers ran in pieces.
const mixRows = 256

// mixer runs layer l's mixer over the pass's T tokens in pieces of at most
// mixRows: what a pass of that length computes, so bitwise the same
// (chunking is invisible), with the mixer scratch bounded by mixRows.
func (m *Model) mixer(l int, st *State, u, mix []float32, T int) {
	ly, ws, H := &m.layers[l], &st.ws, m.cfg.HiddenSize
	half := m.cfg.RotaryDim / 2
	cos, sin := ws.cos, ws.sin // the pass's RoPE tables; attnMixer reads its piece's
	defer func() { ws.cos, ws.sin = cos, sin }()
	for o := 0; o < T; o += mixRows {
		n := min(mixRows, T-o)
		u0, mix0 := u[o*H:(o+n)*H], mix[o*H:(o+n)*H]
		switch ly.kind {
		case LinearAttention:
			ls := &st.layers[l]
			m.gdn.Mixer(ly.gdn, ls.conv, ls.rec, &ws.gdn, u0, mix0, n)
		case FullAttention:
			ws.cos, ws.sin = cos[o*half:(o+n)*half], sin[o*half:(o+n)*half]
			m.attnMixer(ly.attn, &st.layers[l], &ws.attn, ws, st.pos+o, u0, mix0, n)
		}
	}
}

// ForwardChunked is Forward in passes of at most chunk tokens (chunk ≤ 0:
// the default of 256). Results are bitwise those of Forward; only the
// scratch memory (ScratchBytesPerToken × chunk) and, with streamed experts,
// the disk bytes read change.
func (m *Model) ForwardChunked(st *State, ids []int, logits []float32, allLogits bool, chunk int) error {
	if chunk <= 0 {
		chunk = maxChunk
	}
	if err := m.checkForward(st, ids, logits, allLogits); err != nil {
		return err
	}
	if err := st.growKV(st.pos + len(ids)); err != nil {
		return err
	}
	pass := blocks.Chunks(len(ids), logits, allLogits, m.cfg.VocabSize, chunk)
	for pass.Next() {
		if err := m.forwardChunk(st, ids[pass.Start:pass.End], pass.Out, allLogits); err != nil {
			st.failed = err
			return err
		}
	}
	return nil
}

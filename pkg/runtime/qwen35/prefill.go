package qwen35

// Prefill scheduling (docs/prefill.md). A pass of T tokens through the
// layers hands each MoE layer its T tokens grouped by expert (runExperts),
// so every routed expert is fetched at most once per pass. When the expert
// cache cannot hold every expert, a pass reads nearly every expert of every
// layer from disk whatever T is, so the disk bytes per prompt token fall as
// 1/T: a long prompt is best prefilled in as few, as long passes as the
// scratch memory allows. Any split of a prompt gives bitwise the same
// logits and state (TestChunkingIsBitwiseInvisible), so the pass length is
// free to choose.

// DefaultPrefillChunk is the pass length when the experts all fit in
// memory: longer passes then buy nothing, and it keeps scratch small.
const DefaultPrefillChunk = 256

// PrefillScratchBudget bounds the activation scratch of one long pass
// (ScratchBytesPerToken × pass length) when PrefillChunk lengthens passes.
const PrefillScratchBudget = 384 << 20

// ScratchBytesPerToken is an upper bound on the scratch one token of a
// pass adds to a State's workspace: the residual stream and its norms, the
// RoPE tables, every mixer's and FFN's [T, …] buffers, the routed expert
// outputs [T, k, H] and the int8 activations the kernels quantize. It
// excludes the KV cache (which holds the prompt whatever the pass length)
// and the caller's logits.
func (c Config) ScratchBytesPerToken() int64 {
	H := c.HiddenSize
	floats := 3*H + c.RotaryDim + H // x, u, mix; cos and sin; final norm
	hasGDN, hasAttn := false, false
	for _, k := range c.Layers {
		hasGDN = hasGDN || k == LinearAttention
		hasAttn = hasAttn || k == FullAttention
	}
	if hasGDN { // proj, conv, z, o, a, b
		floats += 2*c.ConvChannels() + 2*c.valueDim() + 2*c.LinearValueHeads
	}
	if hasAttn { // q and gate, k, v, o
		floats += 3*c.NumHeads*c.HeadDim + 2*c.kvDim()
	}
	widest := max(H, c.NumHeads*c.HeadDim, c.valueDim(), c.ConvChannels())
	switch c.Arch {
	case ArchMoE:
		k := c.ExpertsPerToken
		// gate and up (one expert's rows, at most T), shared gate and up,
		// router logits, weights and sharedGate, routed, an expert's
		// gathered inputs and outputs, sel (ints) and users (pairs of ints).
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

// PrefillChunk is the pass length for prefilling tokens prompt tokens.
// While every expert stays resident (streaming false) it is
// DefaultPrefillChunk. When experts stream from disk it is as long as
// PrefillScratchBudget allows (never below DefaultPrefillChunk), and the
// prompt is then split into passes of equal length (the last may be one
// shorter), so no short tail pass re-reads every expert for a few tokens.
func (c Config) PrefillChunk(tokens int, streaming bool) int {
	if !streaming || tokens <= DefaultPrefillChunk {
		return DefaultPrefillChunk
	}
	longest := max(int(PrefillScratchBudget/c.ScratchBytesPerToken()), DefaultPrefillChunk)
	passes := (tokens + longest - 1) / longest
	return (tokens + passes - 1) / passes
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
	V := m.cfg.VocabSize
	for start := 0; start < len(ids); start += chunk {
		end := min(start+chunk, len(ids))
		var out []float32
		switch {
		case logits == nil:
		case allLogits:
			out = logits[start*V : end*V]
		case end == len(ids):
			out = logits
		}
		if err := m.forwardChunk(st, ids[start:end], out, allLogits); err != nil {
			st.failed = err
			return err
		}
	}
	return nil
}

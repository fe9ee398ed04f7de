package qwen38

import (
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// maxChunk bounds the tokens one pass through the layers carries, and so
// the scratch memory of a long prefill. Chunking never changes results.
var maxChunk = 256

// MaxChunk is the most tokens one pass through the layers carries (Forward
// splits longer inputs): what sizes the per-pass buffers, such as the
// n-gram rows read ahead for a pass.
func MaxChunk() int { return maxChunk }

// StepProfile is the decode-step profile shared with qwen35.
type StepProfile = model.StepProfile

// TapPoint says which hidden state a Tap sees.
type TapPoint uint8

const (
	TapResidual   TapPoint = iota // the residual [T, S·H] entering layer `layer` (len(layers): after the last)
	TapPLE                        // a PLE layer's output u + z [T, S·H], before it is added
	TapAttnRead                   // the mixer's input x [T, H] from the attention gated residual
	TapAttnGates                  // its write gates c [T, S]
	TapMixer                      // the mixer's (GDN or attention) output [T, H]
	TapMLPRead                    // the MoE input [T, H] from the MLP gated residual
	TapMLPGates                   // its write gates c [T, S]
	TapMoE                        // the MoE output [T, H]
	TapFinalMixer                 // the final mixer's output [rows, H], lm_head's input
)

// Tap observes hidden states during Forward for the tokens at positions
// pos, pos+1, …; hidden is only valid during the call.
type Tap func(point TapPoint, layer, pos int, hidden []float32)

// workspace is the per-State scratch of Forward.
type workspace struct {
	R        []float32 // the residual [T, S·H]
	x, y     []float32 // a sublayer's input and output [T, H]
	c        []float32 // the write gates of the sublayer in flight [T, S]
	cos, sin []float32 // RoPE tables [T, rd/2]
	rows     [][]int64 // each PLE layer's row ids for the chunk [T, NH]
	final    []float32
	hc       residualScratch
	ple      pleScratch
	gdn      blocks.GDNScratch
	attn     attnScratch
	moe      blocks.MoEScratch
	predict  predictScratch
	prof     *StepProfile
}

// Forward feeds ids to the sequence st. When logits is non-nil it receives
// the logits [len(ids), V] when allLogits, else [1, V] for the last token.
// Arguments are checked before anything changes; after a failure half-way
// st refuses further use until Reset.
func (m *Model) Forward(st *State, ids []int, logits []float32, allLogits bool) error {
	return m.ForwardChunked(st, ids, logits, allLogits, maxChunk)
}

// ForwardChunked is Forward in passes of at most chunk tokens (≤ 0: the
// default); results are bitwise those of Forward.
func (m *Model) ForwardChunked(st *State, ids []int, logits []float32, allLogits bool, chunk int) error {
	if chunk <= 0 {
		chunk = maxChunk
	}
	if err := m.checkForward(st, ids, logits, allLogits); err != nil {
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

func (m *Model) checkForward(st *State, ids []int, logits []float32, allLogits bool) error {
	if err := st.check(m); err != nil {
		return err
	}
	return blocks.CheckForward("qwen38", ids, logits, allLogits, m.cfg.VocabSize, st.pos, st.maxContext)
}

// forwardChunk runs T tokens through every layer (§3.2). The n-gram rows
// of the whole chunk are known from its ids alone, so they are computed
// and handed to the table's prefetcher before the first layer runs.
func (m *Model) forwardChunk(st *State, ids []int, out []float32, allRows bool) error {
	c := &m.cfg
	T, H, SH := len(ids), c.HiddenSize, c.StreamWidth()
	ws := &st.ws
	ws.setProfile(st.profile, T)
	ws.prof.Begin()
	m.moe.BeginPass(T)
	ws.moe.Pos = st.pos
	st.growKV(st.pos + T)
	m.pleRowsAhead(st, ids)
	R := blocks.Grow(&ws.R, T*SH)
	for t, id := range ids {
		e := R[t*SH : t*SH+H]
		m.embed.Row(e, id)
		for s := H; s < SH; s += H {
			copy(R[t*SH+s:t*SH+s+H], e)
		}
	}
	m.ropeTables(ws, st.pos, T)
	x, y := blocks.Grow(&ws.x, T*H), blocks.Grow(&ws.y, T*H)
	for l := range m.layers {
		ly := &m.layers[l]
		st.observe(TapResidual, l, R)
		if ly.ple != nil {
			if err := m.pleBlock(ly.ple, &st.ple[ly.ple.index], &ws.ple, ws.rows[ly.ple.index], R, T, st); err != nil {
				return err
			}
		}
		m.read(&ly.attnHC, &ws.hc, R, x, T)
		ws.prof.Mark(model.PhaseNorms, 0)
		st.observe(TapAttnRead, l, x)
		st.observe(TapAttnGates, l, ws.hc.c)
		ls := &st.layers[l]
		switch ly.kind {
		case LinearAttention:
			m.gdn.Mixer(ly.gdn, ls.conv, ls.rec, &ws.gdn, x, y, T)
		case SparseAttention:
			m.attnMixer(ly.attn, &ls.attn, &ws.attn, ws, st.pos, x, y, T)
		}
		st.observe(TapMixer, l, y)
		m.write(R, ws.hc.c, y, T)
		m.read(&ly.mlpHC, &ws.hc, R, x, T)
		ws.prof.Mark(model.PhaseNorms, 0)
		st.observe(TapMLPRead, l, x)
		st.observe(TapMLPGates, l, ws.hc.c)
		if err := m.moe.Block(l, &ly.moe, &ws.moe, x, y, T); err != nil {
			return err
		}
		st.observe(TapMoE, l, y)
		m.write(R, ws.hc.c, y, T)
		ws.prof.Mark(model.PhaseNorms, 0)
		if T == 1 {
			m.prefetchNext(ws, l+1, R)
		}
	}
	st.observe(TapResidual, len(m.layers), R)
	if out == nil && st.tap == nil {
		st.pos += T
		return nil
	}
	rows, first := T, 0
	if !allRows {
		rows, first = 1, T-1
	}
	final := blocks.Grow(&ws.final, rows*H)
	m.read(&m.mixer, &ws.hc, R[first*SH:], final, rows)
	if st.tap != nil {
		st.tap(TapFinalMixer, len(m.layers), st.pos+first, final)
	}
	if out != nil {
		blocks.MatMul(m.pool, out, m.lmHead, final, rows)
		ws.prof.MarkProducts(model.PhaseLMHead, m.lmHead)
	}
	st.pos += T
	return nil
}

// pleRowsAhead computes every PLE layer's row ids for the chunk (advancing
// the n-gram histories) and announces them to the table.
func (m *Model) pleRowsAhead(st *State, ids []int) {
	ws := &st.ws
	for len(ws.rows) < len(m.ple) {
		ws.rows = append(ws.rows, nil)
	}
	pf, _ := m.ngrams.(NgramPrefetcher)
	for k, p := range m.ple {
		ws.rows[k] = m.pleRows(p, &st.ple[k], ids, ws.rows[k])
		if pf != nil {
			pf.Prefetch(k, ws.rows[k])
		}
	}
}

// setProfile hands p to every part of a T-token Forward when T is 1.
func (ws *workspace) setProfile(p *StepProfile, T int) {
	if T != 1 {
		p = nil
	}
	ws.prof, ws.gdn.Prof, ws.moe.Prof = p, p, p
}

func (st *State) observe(p TapPoint, layer int, hidden []float32) {
	if st.tap != nil {
		st.tap(p, layer, st.pos, hidden)
	}
}

// ropeTables fills cos/sin for positions pos0 … pos0+T−1.
func (m *Model) ropeTables(ws *workspace, pos0, T int) {
	half := m.cfg.RotaryDim / 2
	cos, sin := blocks.Grow(&ws.cos, T*half), blocks.Grow(&ws.sin, T*half)
	for t := range T {
		m.rope.Tables(pos0+t, cos[t*half:(t+1)*half], sin[t*half:(t+1)*half])
	}
}

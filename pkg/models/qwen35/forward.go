package qwen35

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// maxChunk bounds how many tokens one pass through the layers carries, and
// so the scratch memory of a long prefill. Chunking never changes results;
// it is a variable only so tests can shrink it.
var maxChunk = 256

// TapPoint says which hidden state a Tap sees.
type TapPoint uint8

const (
	TapEmbeddings TapPoint = iota // the embedding rows (layer is −1)
	TapLayer                      // the residual stream after decoder layer `layer`
	TapFinalNorm                  // the final norm's output (layer is len(layers)), only for rows that get logits
)

// Tap observes hidden states during Forward: hidden is [rows, H] for the
// tokens at positions pos, pos+1, …; it is only valid during the call.
type Tap func(point TapPoint, layer, pos int, hidden []float32)

// workspace is the per-State scratch of Forward, sized for the largest chunk
// seen so far.
type workspace struct {
	x, u, mix []float32 // residual, normed input, mixer/FFN output [T, H]
	cos, sin  []float32 // RoPE tables [T, rd/2]
	gdn       blocks.GDNScratch
	attn      attnScratch
	moe       blocks.MoEScratch
	mlp       mlpScratch
	final     []float32
	predict   predictScratch
	prof      *model.StepProfile // the state's profile during a decode step, else nil
}

// Forward feeds ids to the sequence st. When logits is non-nil it receives
// the logits [len(ids), V] when allLogits, else [1, V] for the last token.
// A nil logits skips lm_head (prefill whose logits nobody reads).
//
// Arguments are checked before anything changes. If Forward fails later
// (an expert that cannot be read), st is left inconsistent and refuses
// further use until Reset or CopyFrom.
func (m *Model) Forward(st *State, ids []int, logits []float32, allLogits bool) error {
	return m.ForwardChunked(st, ids, logits, allLogits, maxChunk)
}

func (m *Model) checkForward(st *State, ids []int, logits []float32, allLogits bool) error {
	switch {
	case st == nil || st.model != m:
		return fmt.Errorf("qwen35: Forward: the state was not made by this model's NewState")
	case st.failed != nil:
		return fmt.Errorf("qwen35: Forward: the state is inconsistent after an earlier failure (%v); Reset it or CopyFrom a snapshot", st.failed)
	}
	return blocks.CheckForward("qwen35", ids, logits, allLogits, m.cfg.VocabSize, st.pos, st.maxContext)
}

// forwardChunk runs T tokens through every layer. Every per-token step uses
// the same code whatever T is, which is what makes chunking invisible.
func (m *Model) forwardChunk(st *State, ids []int, out []float32, allRows bool) error {
	c := &m.cfg
	T, H := len(ids), c.HiddenSize
	ws := &st.ws
	x := blocks.Grow(&ws.x, T*H)
	u := blocks.Grow(&ws.u, T*H)
	mix := blocks.Grow(&ws.mix, T*H)
	for t, id := range ids {
		m.embed.Row(x[t*H:(t+1)*H], id)
	}
	st.observe(TapEmbeddings, -1, x)
	m.ropeTables(ws, st.pos, T)

	ws.setProfile(st.profile, T)
	ws.prof.Begin()
	m.moe.BeginPass(T)
	ws.moe.Pos = st.pos
	for l := range m.layers {
		ly := &m.layers[l]
		blocks.RMSNormRows(u, x, ly.inputNorm, H, c.RMSNormEps)
		ws.prof.Mark(model.PhaseNorms, 0)
		m.mixer(l, st, u, mix, T)
		blocks.AddTo(x, mix)
		blocks.RMSNormRows(u, x, ly.postNorm, H, c.RMSNormEps)
		ws.prof.Mark(model.PhaseNorms, 0)
		if ly.moe != nil {
			if err := m.moe.Block(l, ly.moe, &ws.moe, u, mix, T); err != nil {
				return err
			}
		} else {
			m.denseMLP(ly.mlp, &ws.mlp, u, mix, T)
		}
		blocks.AddTo(x, mix)
		ws.prof.Mark(model.PhaseNorms, 0)
		if T == 1 {
			m.prefetchNext(ws, l+1, x)
		}
		st.observe(TapLayer, l, x)
	}

	rows, first := T, 0
	if !allRows {
		rows, first = 1, T-1
	}
	if out == nil && st.tap == nil {
		st.pos += T
		return nil
	}
	final := blocks.Grow(&ws.final, rows*H)
	blocks.RMSNormRows(final, x[first*H:], m.norm, H, c.RMSNormEps)
	if st.tap != nil {
		st.tap(TapFinalNorm, len(m.layers), st.pos+first, final)
	}
	if out != nil {
		blocks.MatMul(m.pool, out, m.lmHead, final, rows)
		ws.prof.MarkProducts(model.PhaseLMHead, m.lmHead)
	}
	st.pos += T
	return nil
}

// setProfile hands p to every part of a T-token Forward when T is 1 (a
// decode step), and nil otherwise.
func (ws *workspace) setProfile(p *model.StepProfile, T int) {
	if T != 1 {
		p = nil
	}
	ws.prof, ws.gdn.Prof, ws.attn.prof, ws.moe.Prof = p, p, p, p
}

func (st *State) observe(p TapPoint, layer int, hidden []float32) {
	if st.tap != nil {
		st.tap(p, layer, st.pos, hidden)
	}
}

// ropeTables fills cos/sin for positions pos0 … pos0+T−1, shared by every
// attention layer of the chunk.
func (m *Model) ropeTables(ws *workspace, pos0, T int) {
	half := m.cfg.RotaryDim / 2
	cos := blocks.Grow(&ws.cos, T*half)
	sin := blocks.Grow(&ws.sin, T*half)
	for t := range T {
		m.rope.Tables(pos0+t, cos[t*half:(t+1)*half], sin[t*half:(t+1)*half])
	}
}

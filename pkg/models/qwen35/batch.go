package qwen35

import (
	"fmt"
	"sync"

	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// batchScratch is ForwardBatch's workspace. It belongs to the Model, not to
// any State of the batch, so a state stepped alone between batches keeps
// its own scratch and a batch never leans on one member's buffers. Its
// [N, …] buffers are those of a pass as long as the largest batch so far
// (Config.ScratchBytesPerToken × N); the mixers' buffers, a pass's of
// min(N, mixRows) tokens (Config.MixerScratchBytes bounds them).
type batchScratch struct {
	mu     sync.Mutex // ForwardBatch calls take turns on the one workspace
	ws     workspace
	routes batchRoutes // the MoE's override while the batch's states replay routing
}

// batchRoutes routes a batched step whose states replay routing
// (SetRouteOverride): row t, the token of states[t], takes the experts
// states[t]'s own override names for its own position, which is what its
// one-token step asks. The batch's MoE scratch counts positions from 0
// (Pos), so the position it asks for is the row.
type batchRoutes struct{ states []*State }

func (b *batchRoutes) Experts(row, layer int, dst []int) ([]int, error) {
	st := b.states[row]
	ids, err := st.ws.moe.Override.Experts(st.pos, layer, dst)
	if err != nil {
		return ids, fmt.Errorf("state %d of the batch, at position %d: %w", row, st.pos, err)
	}
	return ids, nil
}

// ForwardBatch is one decode step for N = len(states) distinct states of
// m: state i is fed the one token ids[i] at its own position. When logits
// is non-nil it receives [N, V], row i the logits of states[i]'s token.
//
// Each row of logits and each state afterwards (KV, Gated DeltaNet conv
// and recurrent state, length) is bitwise what m.Forward(states[i],
// ids[i:i+1], row, false) gives, whatever the other states, their number
// and their order: the row-batched products (norms, the mixers' input and
// output projections, MoE block, dense MLP, lm_head) give each row the bits
// it gets alone (the kernels contract that makes chunking invisible), and
// each state's part of its mixer (attention over its own KV cache with its
// own position's RoPE, or the Gated DeltaNet conv and recurrence on its own
// state) runs alone on its row, as in its one-token step.
//
// Arguments are all checked before anything changes. If the step fails
// later (an expert that cannot be read), every state of the batch is left
// refusing work until Reset or CopyFrom, as Forward leaves its one state.
//
// States that replay routing (SetRouteOverride, each its own override or
// one shared) each route their row as their own override names for their
// own position, as their one-token step does; a batch routes all its
// states one way, so one whose states disagree (some replaying, some
// routed by the router) is refused.
//
// What a batch does not do: a state's StepProfile is not fed by batched
// steps (its phases would mix N states' work); the next layer's expert
// prediction (prefetchNext) runs only for a batch of one, as it only warms
// the expert cache.
func (m *Model) ForwardBatch(states []*State, ids []int, logits []float32) error {
	if err := m.checkBatch(states, ids, logits); err != nil {
		return err
	}
	for _, st := range states {
		if err := st.growKV(st.pos + 1); err != nil { // checked: cannot pass max context
			return err
		}
	}
	m.batch.mu.Lock()
	defer m.batch.mu.Unlock()
	if err := m.forwardBatch(&m.batch.ws, states, ids, logits); err != nil {
		for _, st := range states {
			st.failed = err
		}
		return err
	}
	return nil
}

func (m *Model) checkBatch(states []*State, ids []int, logits []float32) error {
	N, V := len(states), m.cfg.VocabSize
	switch {
	case N == 0:
		return fmt.Errorf("qwen35: ForwardBatch: no states")
	case len(ids) != N:
		return fmt.Errorf("qwen35: ForwardBatch: %d states but %d tokens; give each state exactly one token", N, len(ids))
	case logits != nil && len(logits) != N*V:
		return fmt.Errorf("qwen35: ForwardBatch: logits has %d values, want %d states × vocab %d = %d", len(logits), N, V, N*V)
	}
	for i, st := range states {
		switch {
		case st == nil || st.model != m:
			return fmt.Errorf("qwen35: ForwardBatch: state %d was not made by this model's NewState", i)
		case st.failed != nil:
			return fmt.Errorf("qwen35: ForwardBatch: state %d is inconsistent after an earlier failure (%v); Reset it or CopyFrom a snapshot", i, st.failed)
		case (st.ws.moe.Override != nil) != (states[0].ws.moe.Override != nil):
			replays, router := i, 0
			if st.ws.moe.Override == nil {
				replays, router = 0, i
			}
			return fmt.Errorf("qwen35: ForwardBatch: state %d replays routing (SetRouteOverride) and state %d is routed by the router; a batch routes its states one way, so step them in separate batches", replays, router)
		case ids[i] < 0 || ids[i] >= V:
			return fmt.Errorf("qwen35: ForwardBatch: token %d of state %d is outside the vocabulary [0, %d)", ids[i], i, V)
		case st.pos+1 > st.maxContext:
			return fmt.Errorf("qwen35: ForwardBatch: state %d holds %d tokens, its max context; start a new sequence or raise StateOptions.MaxContext", i, st.pos)
		}
		// Batches are a few states: a quadratic scan beats a map's allocation.
		for j := range i {
			if states[j] == st {
				return fmt.Errorf("qwen35: ForwardBatch: state %d is also state %d; a state takes one token per step", i, j)
			}
		}
	}
	return nil
}

// forwardBatch is forwardChunk with row i belonging to states[i]: the same
// per-row code in the same order, so each row gets the bits of its state's
// own one-token step.
func (m *Model) forwardBatch(ws *workspace, states []*State, ids []int, out []float32) error {
	c := &m.cfg
	N, H := len(ids), c.HiddenSize
	x := blocks.Grow(&ws.x, N*H)
	u := blocks.Grow(&ws.u, N*H)
	mix := blocks.Grow(&ws.mix, N*H)
	taps := false
	for i, id := range ids {
		m.embed.Row(x[i*H:(i+1)*H], id)
		states[i].observe(TapEmbeddings, -1, x[i*H:(i+1)*H])
		taps = taps || states[i].tap != nil
	}
	half := c.RotaryDim / 2
	cos := blocks.Grow(&ws.cos, N*half)
	sin := blocks.Grow(&ws.sin, N*half)
	for i, st := range states {
		m.rope.Tables(st.pos, cos[i*half:(i+1)*half], sin[i*half:(i+1)*half])
	}

	ws.setProfile(nil, N)
	m.moe.BeginPass(N)
	ws.moe.Pos = 0
	if states[0].ws.moe.Override != nil { // checkBatch: then every state has one
		m.batch.routes.states = states
		ws.moe.Override = &m.batch.routes
		defer func() { ws.moe.Override, m.batch.routes.states = nil, nil }()
	}
	for l := range m.layers {
		ly := &m.layers[l]
		blocks.RMSNormRows(u, x, ly.inputNorm, H, c.RMSNormEps)
		m.batchMixers(l, ws, states, u, mix)
		blocks.AddTo(x, mix)
		blocks.RMSNormRows(u, x, ly.postNorm, H, c.RMSNormEps)
		if ly.moe != nil {
			if err := m.moe.Block(l, ly.moe, &ws.moe, u, mix, N); err != nil {
				return err
			}
		} else {
			m.denseMLP(ly.mlp, &ws.mlp, u, mix, N)
		}
		blocks.AddTo(x, mix)
		if N == 1 {
			m.prefetchNext(ws, l+1, x)
		}
		for i, st := range states {
			st.observe(TapLayer, l, x[i*H:(i+1)*H])
		}
	}

	if out != nil || taps {
		final := blocks.Grow(&ws.final, N*H)
		blocks.RMSNormRows(final, x, m.norm, H, c.RMSNormEps)
		for i, st := range states {
			if st.tap != nil {
				st.tap(TapFinalNorm, len(m.layers), st.pos, final[i*H:(i+1)*H])
			}
		}
		if out != nil {
			blocks.MatMul(m.pool, out, m.lmHead, final, N)
		}
	}
	for _, st := range states {
		st.pos++
	}
	return nil
}

// batchMixers runs layer l's mixer over the batch, row i being states[i]'s
// token: the input and output projections over all N rows at once, so each
// projection matrix is read once per step rather than once per state, and
// between them each state's own part (attention with its KV cache at its
// position, whose RoPE tables are row i's; or the Gated DeltaNet conv and
// recurrence with its conv window and recurrent state) on its row alone,
// what its one-token step runs. Rows go in pieces of at most mixRows, which
// bounds the mixer scratch as in a pass.
func (m *Model) batchMixers(l int, ws *workspace, states []*State, u, mix []float32) {
	ly, H, half := &m.layers[l], m.cfg.HiddenSize, m.cfg.RotaryDim/2
	cos, sin := ws.cos, ws.sin // every row's tables; attnCore reads ws.cos/sin of its one token
	defer func() { ws.cos, ws.sin = cos, sin }()
	for o := 0; o < len(states); o += mixRows {
		piece := states[o:min(o+mixRows, len(states))]
		n := len(piece)
		u0, mix0 := u[o*H:(o+n)*H], mix[o*H:(o+n)*H]
		switch ly.kind {
		case LinearAttention:
			m.gdn.Project(ly.gdn, &ws.gdn, u0, n)
			for i, st := range piece {
				ls := &st.layers[l]
				m.gdn.Recur(ly.gdn, ls.conv, ls.rec, &ws.gdn, i, 1)
			}
			m.gdn.Output(ly.gdn, &ws.gdn, mix0, n)
		case FullAttention:
			m.attnProject(ly.attn, &ws.attn, u0, n)
			for i, st := range piece {
				r := o + i
				ws.cos, ws.sin = cos[r*half:(r+1)*half], sin[r*half:(r+1)*half]
				m.attnCore(ly.attn, &st.layers[l], &ws.attn, ws, st.pos, i, 1)
			}
			m.attnOutput(ly.attn, &ws.attn, mix0, n)
		}
	}
}

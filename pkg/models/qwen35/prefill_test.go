package qwen35

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// One pass of a whole prompt (ForwardChunked) gives bitwise the logits and
// state of Forward's 256-token passes, and of passes of any other length,
// on any number of threads.
func TestLongPassesAreBitwiseInvisible(t *testing.T) {
	for _, fm := range fixtureModels {
		refs := loadRefs(t, filepath.Join(fixturesDir(t), fm.refs))
		ids := refs[len(refs)-1].IDs
		threads := []int{1, 2, 3}
		if quickTests() {
			// The race detector needs one concurrent case, on a prompt still
			// longer than two passes of 256 or of 300 tokens; scripts/test.sh
			// runs all without it.
			threads, ids = []int{2}, ids[:min(len(ids), 600)]
		}
		for _, threads := range threads {
			t.Run(fmt.Sprintf("%s/%d-threads", fm.name, threads), func(t *testing.T) {
				pool := kernels.NewPool(threads)
				defer pool.Close()
				m, _ := fm.open(t, pool)
				want, wantSt := prefill(t, m, StateOptions{}, ids, []int{len(ids)}) // Forward: 256-token passes
				V := m.Config().VocabSize
				for _, chunk := range []int{len(ids), 300, 7} {
					st := m.NewState(StateOptions{})
					got := make([]float32, len(ids)*V)
					if err := m.ForwardChunked(st, ids, got, true, chunk); err != nil {
						t.Fatal(err)
					}
					if i := bitwiseDiff(got, want); i >= 0 {
						t.Errorf("passes of %d: logit %d = %v, Forward %v", chunk, i, got[i], want[i])
					}
					assertSameState(t, st, wantSt)
				}
			})
		}
	}
}

func TestPrefillChunk(t *testing.T) {
	cfg := Config{Arch: ArchMoE, HiddenSize: 2048, RotaryDim: 64, NumHeads: 16, NumKVHeads: 2, HeadDim: 256,
		LinearKeyHeads: 16, LinearValueHeads: 32, LinearKeyDim: 128, LinearValueDim: 128,
		NumExperts: 256, ExpertsPerToken: 8, ExpertIntermediate: 512, SharedIntermediate: 512,
		Layers: []LayerKind{LinearAttention, FullAttention}}
	const budget = PrefillScratchBudget
	longest := int((budget - cfg.MixerScratchBytes()) / cfg.ScratchBytesPerToken())
	for _, tc := range []struct {
		tokens  int
		scratch int64
		want    int
	}{
		{4096, 0, 256},
		{100, budget, 256},
		{256, budget, 256},
		{longest, budget, longest},
		{longest + 1, budget, (longest + 2) / 2},
		{4096, budget, (4096 + (4096+longest-1)/longest - 1) / ((4096 + longest - 1) / longest)},
	} {
		if got := cfg.PrefillChunk(tc.tokens, tc.scratch); got != tc.want {
			t.Errorf("PrefillChunk(%d, %d) = %d, want %d", tc.tokens, tc.scratch, got, tc.want)
		}
	}
	if longest < 2048 || longest > 4096 {
		t.Errorf("a 35B-A3B layer's scratch allows %d-token passes at the least budget; it is meant to allow 2 passes for 4096 tokens", longest)
	}
	// Beside an 8 GiB expert cache a 4096-token prompt is one pass.
	if got := cfg.PrefillChunk(4096, PassScratchBudget(8<<30)); got != 4096 {
		t.Errorf("PrefillChunk(4096, PassScratchBudget(8 GiB)) = %d, want 4096 (one pass)", got)
	}
	if got := PassScratchBudget(1 << 30); got != budget {
		t.Errorf("PassScratchBudget(1 GiB) = %d, want the floor %d", got, budget)
	}
}

// ScratchBytesPerToken and MixerScratchBytes bound what a pass of T tokens
// grows the workspace's [T, …] buffers to.
func TestScratchBytesPerTokenBoundsTheWorkspace(t *testing.T) {
	for _, fm := range fixtureModels {
		t.Run(fm.name, func(t *testing.T) {
			m, _ := fm.open(t, nil)
			refs := loadRefs(t, filepath.Join(fixturesDir(t), fm.refs))
			ids := refs[len(refs)-1].IDs
			st := m.NewState(StateOptions{})
			last := make([]float32, m.Config().VocabSize)
			if err := m.ForwardChunked(st, ids, last, false, len(ids)); err != nil {
				t.Fatal(err)
			}
			cfg := m.Config()
			got, bound := workspaceBytes(&st.ws), cfg.ScratchBytesPerToken()*int64(len(ids))+cfg.MixerScratchBytes()
			if got > bound {
				t.Errorf("a %d-token pass grew the workspace to %d bytes, more than ScratchBytesPerToken × T + MixerScratchBytes = %d", len(ids), got, bound)
			}
		})
	}
}

// workspaceBytes sums the buffers of ws whose length grows with the pass.
func workspaceBytes(ws *workspace) int64 {
	var n int
	for _, b := range [][]float32{ws.x, ws.u, ws.mix, ws.cos, ws.sin, ws.final,
		ws.attn.q2, ws.attn.k, ws.attn.v, ws.attn.o,
		ws.mlp.gate, ws.mlp.up} {
		n += 4 * cap(b)
	}
	return int64(n) + ws.gdn.GrowingBytes() + ws.moe.GrowingBytes()
}

package qwen38

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix/hfsnap"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

// traceTol bounds |ours − transformers| / (1 + |transformers|) for every
// traced activation: float32 in a different order than torch drifts by
// about 1e-5 over eight layers on this fixture.
const traceTol = 1e-4

// trace holds tiny-qwen38.trace.safetensors.
type trace map[string]hfsnap.Tensor

func loadTrace(t *testing.T) trace {
	return hfsnap.ReadFile(t, filepath.Join(fixturesDir(t), "tiny-qwen38.trace.safetensors"))
}

func (tr trace) floats(t *testing.T, name string) []float32 {
	t.Helper()
	rt, ok := tr[name]
	if !ok {
		t.Fatalf("trace has no %s", name)
	}
	v, err := widen(rt.DType, rt.Data)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (tr trace) ints(t *testing.T, name string) []int {
	t.Helper()
	rt, ok := tr[name]
	if !ok {
		t.Fatalf("trace has no %s", name)
	}
	var out []int
	switch rt.DType {
	case safetensors.I64:
		for i := 0; i < len(rt.Data); i += 8 {
			out = append(out, int(int64(uint64(rt.Data[i])|uint64(rt.Data[i+1])<<8|uint64(rt.Data[i+2])<<16|uint64(rt.Data[i+3])<<24|
				uint64(rt.Data[i+4])<<32|uint64(rt.Data[i+5])<<40|uint64(rt.Data[i+6])<<48|uint64(rt.Data[i+7])<<56)))
		}
	case safetensors.I32:
		for i := 0; i < len(rt.Data); i += 4 {
			out = append(out, int(int32(uint32(rt.Data[i])|uint32(rt.Data[i+1])<<8|uint32(rt.Data[i+2])<<16|uint32(rt.Data[i+3])<<24)))
		}
	default:
		t.Fatalf("%s: dtype %s is not an integer", name, rt.DType)
	}
	return out
}

// relDiff is max |a−b| / (1 + |b|).
func relDiff(a, b []float32) float64 {
	var d float64
	for i := range b {
		d = max(d, math.Abs(float64(a[i])-float64(b[i]))/(1+math.Abs(float64(b[i]))))
	}
	return d
}

// recordTaps runs ids through a fresh state and keeps every tapped tensor
// under the trace's names.
func recordTaps(t *testing.T, m *Model, ids []int, prefix string) map[string][]float32 {
	got := map[string][]float32{}
	names := map[TapPoint]string{TapAttnRead: "attn_hc.x", TapAttnGates: "attn_hc.c", TapMixer: "mixer.out",
		TapMLPRead: "mlp_hc.x", TapMLPGates: "mlp_hc.c", TapMoE: "moe.out"}
	st := m.NewState(StateOptions{})
	st.SetTap(func(p TapPoint, layer, pos int, h []float32) {
		var name string
		switch p {
		case TapResidual:
			name = fmt.Sprintf("residual.%d", layer)
		case TapPLE:
			name = fmt.Sprintf("ple.%d.out", layer)
		case TapFinalMixer:
			name = "final_mixer.out"
		default:
			name = fmt.Sprintf("layers.%d.%s", layer, names[p])
		}
		got[prefix+name] = slices.Clone(h)
	})
	V := m.Config().VocabSize
	logits := make([]float32, len(ids)*V)
	if err := m.Forward(st, ids, logits, true); err != nil {
		t.Fatal(err)
	}
	got[prefix+"logits"] = logits
	return got
}

// TestTraceMatchesTransformers compares every hidden state the trace holds
// for the first prompt — the residual entering each layer, each gated
// residual's read and write gates, each mixer's and MoE's output, the PLE
// output, the final mixer and the logits — within traceTol, and the PLE
// row ids exactly (also for the EOS prompt, where the context resets).
func TestTraceMatchesTransformers(t *testing.T) {
	tr := loadTrace(t)
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) {
			m := open(t, layout, nil)
			ids := tr.ints(t, "input_ids")
			got := recordTaps(t, m, ids, "")
			var names []string
			for name := range got {
				if _, ok := tr[name]; ok {
					names = append(names, name)
				}
			}
			slices.Sort(names)
			if len(names) < 8*6+9+3 {
				t.Fatalf("only %d traced tensors matched a tap: %v", len(names), names)
			}
			worst := 0.0
			for _, name := range names {
				d := relDiff(got[name], tr.floats(t, name))
				worst = max(worst, d)
				if d > traceTol {
					t.Errorf("%s differs by %.3g (relative)", name, d)
				}
			}
			t.Logf("%d traced tensors, worst relative difference %.2g", len(names), worst)
			for _, p := range []struct{ ids, rows string }{{"input_ids", "ple.1.ngram_ids"}, {"eos.input_ids", "eos.ple.1.ngram_ids"}} {
				checkRowIDs(t, m, tr.ints(t, p.ids), tr.ints(t, p.rows))
			}
			eos := tr.ints(t, "eos.input_ids")
			eg := recordTaps(t, m, eos, "eos.")
			if d := relDiff(eg["eos.ple.1.out"], tr.floats(t, "eos.ple.1.out")); d > traceTol {
				t.Errorf("eos prompt: PLE output differs by %.3g", d)
			}
		})
	}
}

func checkRowIDs(t *testing.T, m *Model, ids, want []int) {
	t.Helper()
	p := m.ple[0]
	h := newNgramHistory(m.cfg)
	var got []int64
	for _, id := range ids {
		got = p.consts.rowIDs(got, h, id, m.cfg.EOS, m.cfg.HeadsPerNgram)
	}
	for i := range want {
		if got[i] != int64(want[i]) {
			t.Fatalf("token %d head %d: row %d, transformers %d", i/m.cfg.NgramHeads(), i%m.cfg.NgramHeads(), got[i], want[i])
		}
	}
}

// TestQSASelectionMatchesTransformers: on the 850-token prompt, every
// query's kept tokens in both attention layers equal transformers' with a
// float32 KV cache. The indexer reads its own keys, never K or V, so at
// 16 and 8 bits the first attention layer (whose input no KV touched)
// still keeps exactly transformers' tokens; the second sees inputs the
// narrower cache moved, and its selections are counted (logged).
func TestQSASelectionMatchesTransformers(t *testing.T) {
	tr := loadTrace(t)
	m := open(t, layouts[0], nil)
	ids := quickIDs(tr.ints(t, "long.input_ids"))
	c := m.Config()
	B, cr := c.IndexerBlocks(), c.IndexerBlock
	for _, bits := range kvWidths {
		st := m.NewState(StateOptions{KVBits: bits})
		got := map[int][][]int{}
		st.SetTap(func(p TapPoint, layer, pos int, _ []float32) {
			if p != TapMixer || c.Layers[layer] != SparseAttention {
				return
			}
			sc := &st.ws.attn
			for t := range sc.sparse {
				n := pos + t + 1
				var kept []int
				if !sc.sparse[t] {
					for q := range n {
						kept = append(kept, q)
					}
				} else {
					for _, b := range sc.sel[t*B : (t+1)*B] {
						for q := b * cr; q < (b+1)*cr; q++ {
							kept = append(kept, q)
						}
					}
					for q := n / cr * cr; q < n; q++ {
						kept = append(kept, q)
					}
				}
				got[layer] = append(got[layer], kept)
			}
		})
		if err := m.ForwardChunked(st, ids, nil, false, 300); err != nil {
			t.Fatal(err)
		}
		for _, layer := range []int{3, 7} {
			want := tr.ints(t, fmt.Sprintf("long.layers.%d.qsa_selected", layer))
			width := len(want) / len(tr.ints(t, "long.input_ids"))
			same := 0
			for p, kept := range got[layer] {
				w := want[p*width : (p+1)*width]
				if i := slices.Index(w, -1); i >= 0 {
					w = w[:i]
				}
				switch {
				case slices.Equal(kept, w):
					same++
				case bits == model.KVFloat32 || layer == 3:
					t.Fatalf("kv%d: layer %d query %d keeps %v, transformers %v", bits, layer, p, kept, w)
				}
			}
			t.Logf("kv%d layer %d: %d of %d queries keep transformers' tokens", bits, layer, same, len(got[layer]))
		}
	}
}

// TestTopBlocksOrder: the heap keeps exactly the first n blocks in the
// order (−score, index), ties at zero included, checked against a sort.
func TestTopBlocksOrder(t *testing.T) {
	for seed := range 200 {
		nb := 1 + seed%37
		scores := make([]float32, nb)
		for i := range scores {
			scores[i] = float32((seed*7+i*13)%5) - 2 // many ties, many below zero
			scores[i] = max(0, scores[i])
		}
		for _, n := range []int{1, 2, nb / 2, nb} {
			if n < 1 || n > nb {
				continue
			}
			got := topBlocks(scores, n, nil)
			slices.Sort(got)
			ref := make([]int, nb)
			for i := range ref {
				ref[i] = i
			}
			slices.SortStableFunc(ref, func(a, b int) int {
				switch {
				case scores[a] > scores[b]:
					return -1
				case scores[a] < scores[b]:
					return 1
				}
				return 0
			})
			want := slices.Clone(ref[:n])
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("scores %v, n %d: kept %v, want %v", scores, n, got, want)
			}
		}
	}
}

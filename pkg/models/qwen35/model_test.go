package qwen35

import (
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/safetensors"
)

// Tolerances against transformers' float32 reference (fixtures README:
// float32 in a different order agrees to about 1e-5).
const (
	logitTol = 1e-4
	traceTol = 1e-4
)

// longPromptTokens: prompts at least this long run only in the full test
// set (see quickTests), which runs every prompt; the quick set runs 0–2.
const longPromptTokens = 200

// quickGreedyTokens is how much of the greedy continuation the quick set
// checks; the full set checks all of it (48 tokens tiny-moe, 16 tiny-dense).
const quickGreedyTokens = 8

// TestReferenceLogits runs every prompt of the refs through a full prefill
// and checks last_logits, argmax_per_position and logsumexp_per_position,
// then decodes greedily without EOS stopping and checks the continuation.
func TestReferenceLogits(t *testing.T) {
	for _, fm := range fixtureModels {
		t.Run(fm.name, func(t *testing.T) {
			m, _ := fm.open(t, nil)
			refs := loadRefs(t, filepath.Join(fixturesDir(t), fm.refs))
			V := m.Config().VocabSize
			var worst float64
			for i, ref := range refs {
				if quickTests() && (i > 2 || len(ref.IDs) >= longPromptTokens) {
					t.Logf("prompt %d (%d tokens) skipped in the quick test set", i, len(ref.IDs))
					continue
				}
				start := time.Now()
				st := m.NewState(StateOptions{})
				logits := make([]float32, len(ref.IDs)*V)
				if err := m.Forward(st, ref.IDs, logits, true); err != nil {
					t.Fatalf("prompt %d: %v", i, err)
				}
				last := logits[(len(ref.IDs)-1)*V:]
				d := maxAbsDiff(last, ref.LastLogits)
				worst = max(worst, d)
				if d > logitTol {
					t.Errorf("prompt %d: last_logits max abs diff %.3g > %g", i, d, logitTol)
				}
				for p := range ref.IDs {
					row := logits[p*V : (p+1)*V]
					if got := argmax(row); got != ref.ArgmaxPerPosition[p] {
						t.Errorf("prompt %d position %d: argmax %d, want %d", i, p, got, ref.ArgmaxPerPosition[p])
					}
					if got := logsumexp(row); math.Abs(got-ref.LogsumexpPerPosition[p]) > logitTol {
						t.Errorf("prompt %d position %d: logsumexp %.7g, want %.7g", i, p, got, ref.LogsumexpPerPosition[p])
					}
				}
				want := ref.Greedy
				if quickTests() {
					want = want[:quickGreedyTokens]
				}
				got := greedy(t, m, st, argmax(last), len(want))
				if !slices.Equal(got, want) {
					t.Errorf("prompt %d greedy:\n got %v\nwant %v", i, got, want)
				}
				t.Logf("prompt %d: %d tokens, last_logits max abs diff %.2g, %d greedy tokens, %v", i, len(ref.IDs), d, len(got), time.Since(start).Round(time.Millisecond))
			}
			t.Logf("%s: worst last_logits max abs diff %.2g", fm.name, worst)
		})
	}
}

// greedy continues st from its first chosen token for n tokens in total,
// one Forward per token, without stopping at EOS.
func greedy(t testing.TB, m *Model, st *State, first, n int) []int {
	t.Helper()
	out := []int{first}
	logits := make([]float32, m.Config().VocabSize)
	for len(out) < n {
		if err := m.Forward(st, out[len(out)-1:], logits, false); err != nil {
			t.Fatal(err)
		}
		out = append(out, argmax(logits))
	}
	return out
}

// TestTrace compares the hidden states after every layer and the final
// norm's output with transformers' output_hidden_states for prompt 0.
func TestTrace(t *testing.T) {
	for _, fm := range fixtureModels {
		t.Run(fm.name, func(t *testing.T) {
			m, _ := fm.open(t, nil)
			f, err := safetensors.Open(filepath.Join(fixturesDir(t), fm.trace))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			read := func(name string) []float32 {
				ti, ok := f.Tensor(name)
				if !ok {
					t.Fatalf("trace has no %s", name)
				}
				buf := make([]byte, ti.Size())
				if err := f.ReadTensor(ti, buf); err != nil {
					t.Fatal(err)
				}
				v, err := widen(ti.DType, buf)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			ids := readIDs(t, f)
			L := len(m.Config().Layers)
			got := map[int][]float32{} // hidden_states index → captured rows
			st := m.NewState(StateOptions{})
			st.SetTap(func(p TapPoint, layer, pos int, h []float32) {
				switch p {
				case TapEmbeddings:
					got[0] = slices.Clone(h)
				case TapLayer:
					if layer < L-1 { // HF's last entry is the final norm, not layer L−1
						got[layer+1] = slices.Clone(h)
					}
				case TapFinalNorm:
					got[L] = slices.Clone(h)
				}
			})
			V := m.Config().VocabSize
			logits := make([]float32, len(ids)*V)
			if err := m.Forward(st, ids, logits, true); err != nil {
				t.Fatal(err)
			}
			for j := 0; j <= L; j++ {
				want := read("hidden_states." + strconv.Itoa(j))
				if len(got[j]) != len(want) {
					t.Fatalf("hidden_states.%d: captured %d values, trace has %d", j, len(got[j]), len(want))
				}
				d := maxAbsDiff(got[j], want)
				if d > traceTol {
					t.Errorf("hidden_states.%d: max abs diff %.3g > %g", j, d, traceTol)
				}
				t.Logf("hidden_states.%d: max abs diff %.2g", j, d)
			}
			if d := maxAbsDiff(logits, read("logits")); d > logitTol {
				t.Errorf("logits [T, V]: max abs diff %.3g > %g", d, logitTol)
			} else {
				t.Logf("logits [T, V]: max abs diff %.2g", d)
			}
		})
	}
}

func readIDs(t testing.TB, f *safetensors.File) []int {
	ti, ok := f.Tensor("input_ids")
	if !ok || ti.DType != safetensors.I64 {
		t.Fatalf("trace input_ids missing or not I64")
	}
	buf := make([]byte, ti.Size())
	if err := f.ReadTensor(ti, buf); err != nil {
		t.Fatal(err)
	}
	ids := make([]int, len(buf)/8)
	for i := range ids {
		var v int64
		for b := 7; b >= 0; b-- {
			v = v<<8 | int64(buf[8*i+b])
		}
		ids[i] = int(v)
	}
	return ids
}

package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/sample"
)

type refPrompt = testfix.RefPrompt

func loadRefs(t testing.TB, name string) []refPrompt {
	t.Helper()
	return testfix.LoadRefs(t, testfix.Dev(t, name))
}

// loadJSON decodes the "prompts" array of a refs file into prompts.
func loadJSON(t testing.TB, name string, prompts any) {
	t.Helper()
	raw, err := os.ReadFile(testfix.Dev(t, name))
	if err != nil {
		t.Fatal(err)
	}
	refs := struct {
		Prompts any `json:"prompts"`
	}{prompts}
	if err := json.Unmarshal(raw, &refs); err != nil {
		t.Fatal(err)
	}
}

// install converts a fixture snapshot once per test run (fixinstall).
func install(t testing.TB, snapshot string, bits int) string {
	t.Helper()
	return fixinstall.Install(t, testfix.Dev(t, snapshot), bits)
}

func TestMain(m *testing.M) { fixinstall.Main(m) }

// At 16 bits the install reproduces transformers: last-prompt logits within
// 1e-4 and the greedy continuation token for token.
func TestSixteenBitMatchesTransformers(t *testing.T) {
	for _, tc := range []struct{ snapshot, refs string }{
		{"tiny-moe-fused", "tiny-moe.refs.json"},
		{"tiny-dense", "tiny-dense.refs.json"},
	} {
		t.Run(tc.snapshot, func(t *testing.T) {
			e, err := Load(install(t, tc.snapshot, 16), Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			// The float32 KV cache: transformers' own precision.
			matchesTransformers(t, e, loadRefs(t, tc.refs), SessionOptions{KVBits: 32}, 1e-4)
		})
	}
}

// matchesTransformers runs every prompt of refs (the long ones only in the
// full test set) through a fresh session of e with so: the logits after
// the last prompt token are within tol of transformers', and the greedy
// continuation and its text are transformers' token for token.
func matchesTransformers(t *testing.T, e *Engine, refs []refPrompt, so SessionOptions, tol float64) {
	t.Helper()
	for i, p := range refs {
		if (testing.Short() || raceEnabled) && len(p.IDs) > 100 {
			continue
		}
		var row0 []float32
		res, err := e.NewSession(so).Generate(context.Background(), p.IDs, GenerateOptions{
			MaxTokens: len(p.Greedy), IgnoreEOS: true,
			OnLogits: func(row []float32) error {
				if row0 == nil {
					row0 = append([]float32(nil), row...)
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(row0, p.LastLogits); d > tol {
			t.Errorf("prompt %d: last-token logits differ by %g", i, d)
		}
		if fmt.Sprint(res.IDs) != fmt.Sprint(p.Greedy) {
			t.Errorf("prompt %d: greedy\n got %v\nwant %v", i, res.IDs, p.Greedy)
		}
		if res.Text != p.GreedyText {
			t.Errorf("prompt %d: text %q, want %q", i, res.Text, p.GreedyText)
		}
	}
}

// Quantized installs cannot match to float precision; this records how close
// they come (a measurement, reported with -v) and guards against gross
// breakage: the first greedy token of the short prompts must agree.
func TestQuantizedCloseToTransformers(t *testing.T) {
	refs := loadRefs(t, "tiny-moe.refs.json")
	for _, bits := range []int{4, 8} {
		e, err := Load(install(t, "tiny-moe-fused", bits), Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		agree, total := 0, 0
		for i, p := range refs[:3] {
			res, err := e.NewSession(SessionOptions{}).Generate(context.Background(), p.IDs, GenerateOptions{MaxTokens: 8, IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
			if res.IDs[0] != p.Greedy[0] {
				t.Errorf("%d-bit prompt %d: first token %d, transformers %d", bits, i, res.IDs[0], p.Greedy[0])
			}
			for j := range res.IDs {
				total++
				if res.IDs[j] == p.Greedy[j] {
					agree++
				} else {
					break
				}
			}
		}
		t.Logf("%d-bit: %d of %d greedy tokens agree with transformers before the first divergence", bits, agree, total)
		e.Close()
	}
}

// Sampling is reproducible with a seed and independent of thread count.
func TestDeterminism(t *testing.T) {
	dir := install(t, "tiny-moe-fused", 8)
	p := loadRefs(t, "tiny-moe.refs.json")[1]
	var outs []string
	for _, threads := range []int{1, 2, 3} {
		e, err := Load(dir, Options{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.NewSession(SessionOptions{}).Generate(context.Background(), p.IDs, GenerateOptions{
			MaxTokens: 24, IgnoreEOS: true, Sampling: sample.Params{Temperature: 0.8, TopK: 20, TopP: 0.95, Seed: 7},
		})
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, fmt.Sprint(res.IDs))
		e.Close()
	}
	if outs[0] != outs[1] || outs[1] != outs[2] {
		t.Errorf("outputs differ across thread counts:\n%s", outs)
	}
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// Prefill with no pass length given takes the engine's own (a server calls
// it so), and then generates what Generate on the whole prompt generates.
func TestPrefillWithDefaultPassLength(t *testing.T) {
	e, err := Load(install(t, "tiny-moe-fused", 8), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ids := e.Tokenizer.Encode("Once upon a")
	opt := GenerateOptions{MaxTokens: 8, IgnoreEOS: true}
	whole, err := e.NewSession(SessionOptions{}).Generate(context.Background(), ids, opt)
	if err != nil {
		t.Fatal(err)
	}
	s := e.NewSession(SessionOptions{})
	if err := s.Prefill(context.Background(), ids[:len(ids)-1], 0); err != nil {
		t.Fatal(err)
	}
	split, err := s.Generate(context.Background(), ids[len(ids)-1:], opt)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(whole.IDs, split.IDs) {
		t.Fatalf("prefill then generate gave %v, generate on the whole prompt %v", split.IDs, whole.IDs)
	}
}

// cpuModel is the qwen35 model under e's CPU engine (tests reach past the
// surface to compare against the model's own calls).
func cpuModel(t testing.TB, e *Engine) *qwen35.Model {
	t.Helper()
	c, ok := e.Model().(*qwen35.CPU)
	if !ok {
		t.Fatalf("the engine runs %T, not the qwen35 CPU model", e.Model())
	}
	return c.Model
}

// cpuState is the qwen35 state under s.
func cpuState(t testing.TB, s *Session) *qwen35.State {
	t.Helper()
	c, ok := s.st.(*qwen35.CPUState)
	if !ok {
		t.Fatalf("the session runs %T, not a qwen35 CPU state", s.st)
	}
	return c.State
}

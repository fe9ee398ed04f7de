package runtime

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
)

type refPromptFull struct {
	refPrompt
	ArgmaxPerPosition []int `json:"argmax_per_position"`
}

// positionLogits runs the prompt once and returns the logits of every position.
func positionLogits(t *testing.T, e *Engine, ids []int, kvInitial int) []float32 {
	t.Helper()
	V := e.Install.Manifest.Geometry.VocabSize
	st := cpuModel(t, e).NewState(qwen35.StateOptions{KVInitial: kvInitial})
	logits := make([]float32, len(ids)*V)
	if err := cpuModel(t, e).Forward(st, ids, logits, true); err != nil {
		t.Fatal(err)
	}
	return logits
}

var argmax = testfix.Argmax

// continuesProbes generates greedily from each probe prompt up to EOS (24
// tokens at most): the text is the probe's continuation. bits names the
// install in the error.
func continuesProbes(t *testing.T, e *Engine, bits int, probes map[string]string) {
	t.Helper()
	for prompt, want := range probes {
		res, err := e.NewSession(SessionOptions{}).Generate(context.Background(), e.Tokenizer.Encode(prompt), GenerateOptions{MaxTokens: 24, StopIDs: e.EOSIDs()})
		if err != nil {
			t.Fatal(err)
		}
		if res.Text != want {
			t.Errorf("%d-bit: %q continued with %q, want %q", bits, prompt, res.Text, want)
		}
	}
}

// The per-expert layout converts to the same model: 16-bit logits and greedy
// continuations match transformers too.
func TestPerExpertLayoutMatchesTransformers(t *testing.T) {
	e, err := Load(install(t, "tiny-moe-perexpert", 16), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for i, p := range loadRefs(t, "tiny-moe.refs.json")[:3] {
		res, err := e.NewSession(SessionOptions{}).Generate(context.Background(), p.IDs, GenerateOptions{MaxTokens: len(p.Greedy), IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(res.IDs) != fmt.Sprint(p.Greedy) {
			t.Errorf("prompt %d: greedy differs from transformers", i)
		}
	}
}

// The long prompt through a KV cache that starts at 16 tokens (six doublings)
// gives the same logits as one sized up front.
func TestKVGrowthKeepsLogits(t *testing.T) {
	refs := loadRefs(t, "tiny-moe.refs.json")
	long := refs[len(refs)-1]
	e, err := Load(install(t, "tiny-moe-fused", 16), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	V := e.Install.Manifest.Geometry.VocabSize
	grown := positionLogits(t, e, long.IDs, 16)
	whole := positionLogits(t, e, long.IDs, 8192)
	for i := range grown {
		if grown[i] != whole[i] {
			t.Fatalf("position %d: logits differ after KV growth", i/V)
		}
	}
	if d := maxAbsDiff(grown[len(grown)-V:], long.LastLogits); d > 1e-3 {
		t.Errorf("long prompt: last logits differ from transformers by %g", d)
	}
}

// Quantized installs: the probe prompts continue as the model was trained to,
// and the agreement with transformers is measured (logged with -v).
func TestQuantizedProbesAndAgreement(t *testing.T) {
	probes := map[string]string{
		"The capital of France is":                " Paris.",
		"Once upon a":                             " time, there was a little robot who loved to read books.",
		"The quick brown fox jumps over the lazy": " dog.",
	}
	var refs []refPromptFull
	loadJSON(t, "tiny-moe.refs.json", &refs)
	for _, bits := range []int{4, 8} {
		e, err := Load(install(t, "tiny-moe-fused", bits), Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		continuesProbes(t, e, bits, probes)
		match, total, maxErr := 0, 0, 0.0
		V := e.Install.Manifest.Geometry.VocabSize
		for _, p := range refs {
			if (testing.Short() || raceEnabled) && len(p.IDs) > 100 {
				continue
			}
			logits := positionLogits(t, e, p.IDs, 0)
			for pos, want := range p.ArgmaxPerPosition {
				total++
				if argmax(logits[pos*V:(pos+1)*V]) == want {
					match++
				}
			}
			maxErr = math.Max(maxErr, maxAbsDiff(logits[len(logits)-V:], p.LastLogits))
		}
		t.Logf("%d-bit: argmax agrees with transformers at %d of %d positions (%.1f%%); max last-token logit error %.3f",
			bits, match, total, 100*float64(match)/float64(total), maxErr)
		e.Close()
	}
}

// A prompt longer than the context limit is refused with a clear error.
func TestPromptLongerThanMaxContext(t *testing.T) {
	e, err := Load(install(t, "tiny-moe-fused", 8), Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ids := loadRefs(t, "tiny-moe.refs.json")[0].IDs
	_, err = e.NewSession(SessionOptions{MaxContext: 4}).Generate(context.Background(), ids, GenerateOptions{MaxTokens: 1})
	if err == nil || !strings.Contains(err.Error(), "context limit of 4 tokens") || !strings.Contains(err.Error(), "--max-context") {
		t.Fatalf("got %v, want an error naming the context limit", err)
	}
	t.Log(err)
}

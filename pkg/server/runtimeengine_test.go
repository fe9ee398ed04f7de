package server

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/runtime"
)

func tinyEngine(t *testing.T) *runtime.Engine {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := convert.Run(context.Background(), convert.Options{Input: testfix.Embedded(t), Targets: []convert.Target{{Bits: 8, Dir: dir}}}); err != nil {
		t.Fatal(err)
	}
	e, err := runtime.Load(dir, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func collect(t *testing.T, r *RuntimeEngine, prompt []int, max int) (string, Outcome) {
	t.Helper()
	var text string
	out, err := r.Generate(context.Background(), Generation{Prompt: prompt, MaxTokens: max}, func(s string) bool { text += s; return true })
	if err != nil {
		t.Fatal(err)
	}
	return text, out
}

// A cancelled request leaves the engine usable, and resuming from any
// snapshot (boundary, end of prompt, end of reply) gives the greedy text
// of a cold run.
func TestRuntimeEngineResumesBitIdenticalAndSurvivesCancel(t *testing.T) {
	e := tinyEngine(t)
	warm := NewRuntimeEngine(e, RuntimeOptions{CacheBytes: 64 << 20, PrefillChunk: 8})
	cold := NewRuntimeEngine(e, RuntimeOptions{PrefillChunk: 8})
	tok := e.Tokenizer
	turn1 := tok.Encode("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := warm.Generate(ctx, Generation{Prompt: turn1, MaxTokens: 8}, func(string) bool { return true }); err == nil {
		t.Fatal("a cancelled context did not stop the generation")
	}
	reply, out1 := collect(t, warm, turn1, 12)
	if out1.CachedTokens != 0 {
		t.Fatalf("first request reused %d tokens", out1.CachedTokens)
	}
	turn2 := append(slices.Clone(turn1), tok.Encode(reply+"<|im_end|>\n<|im_start|>user\nAnother.<|im_end|>\n<|im_start|>assistant\n")...)
	for i, prompt := range [][]int{turn2, turn2, turn1} {
		want, _ := collect(t, cold, prompt, 12)
		got, out := collect(t, warm, prompt, 12)
		if got != want {
			t.Fatalf("request %d: warm %q, cold %q", i, got, want)
		}
		if out.CachedTokens == 0 {
			t.Fatalf("request %d reused nothing", i)
		}
	}
	if st := warm.CacheStats(); st.Entries == 0 || st.Bytes > st.Budget {
		t.Fatalf("cache %+v", st)
	}
}

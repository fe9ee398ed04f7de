package runtime

import (
	"context"
	"fmt"
	"testing"
)

// prefillRun generates a few greedy tokens after prompt with the given
// prefill pass length (0: the engine picks) and returns every logits row
// and the result.
func prefillRun(t *testing.T, dir string, opt Options, prompt []int, chunk int) ([][]float32, *Result) {
	t.Helper()
	e, err := Load(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var rows [][]float32
	res, err := e.NewSession(SessionOptions{}).Generate(context.Background(), prompt, GenerateOptions{
		MaxTokens: 6, IgnoreEOS: true, PrefillChunk: chunk,
		OnLogits: func(r []float32) error { rows = append(rows, append([]float32(nil), r...)); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows, res
}

// The long passes a streaming cache prefills in give bitwise the logits of
// today's 256-token passes, for every expert budget, thread count and
// reader count, and read fewer expert bytes; with every expert resident the
// prompt is one pass too. Warm reads (the next layer's experts read into its
// empty slots on a guess) change no bit either, whatever the pass length:
// the reference is 256-token passes without them.
func TestLongPrefillPassesAreBitwiseInvisible(t *testing.T) {
	refs := loadRefs(t, "tiny-moe.refs.json")
	prompt := refs[len(refs)-1].IDs // 960 tokens
	type budget struct{ slots, threads, readers int }
	widths, budgets, chunks := []int{4, 16}, []budget{{4, 1, 1}, {5, 2, 4}, {9, 3, 8}, {15, 2, 2}, {16, 2, 4}}, []int{0, 256, 300, 7}
	if testing.Short() || raceEnabled {
		// The race detector needs the concurrent cases only, on a prompt
		// still longer than one 256-token pass; scripts/test.sh runs the
		// whole matrix again without it.
		prompt = prompt[:300]
		widths, budgets, chunks = []int{4}, []budget{{5, 2, 4}, {9, 3, 8}, {16, 2, 4}}, []int{0, 7}
	}
	for _, bits := range widths {
		dir := install(t, "tiny-moe-fused", bits)
		for _, tc := range budgets {
			t.Run(fmt.Sprintf("%dbit/%d-slots/%d-threads/%d-readers", bits, tc.slots, tc.threads, tc.readers), func(t *testing.T) {
				opt := Options{Threads: tc.threads, Experts: ExpertOptions{Slots: tc.slots, IOThreads: tc.readers, NoWarm: true}}
				want, old := prefillRun(t, dir, opt, prompt, 256)
				if old.Experts.Warmed != 0 {
					t.Fatalf("warm reads off, yet %d issued", old.Experts.Warmed)
				}
				got, res := prefillRun(t, dir, opt, prompt, 0)
				if !sameBits(got, want) {
					t.Error("logits differ from 256-token prefill passes")
				}
				streaming := tc.slots < 16
				switch {
				case res.PrefillChunk != len(prompt):
					t.Errorf("prefill pass %d tokens for a %d-token prompt (streaming %v), want one pass", res.PrefillChunk, len(prompt), streaming)
				case streaming && res.Experts.BytesRead >= old.Experts.BytesRead:
					t.Errorf("one long pass read %d expert bytes, 256-token passes %d", res.Experts.BytesRead, old.Experts.BytesRead)
				}
				opt.Experts.NoWarm = false
				for _, chunk := range chunks {
					got, res := prefillRun(t, dir, opt, prompt, chunk)
					if !sameBits(got, want) {
						t.Errorf("warm reads, passes of %d: logits differ from 256-token passes without them", res.PrefillChunk)
					}
					x := res.Experts
					if x.WarmHits > x.Warmed || x.WarmBytes > x.BytesRead {
						t.Errorf("passes of %d: %d warm reads, %d asked for, %d of %d bytes: the counts do not add up", res.PrefillChunk, x.Warmed, x.WarmHits, x.WarmBytes, x.BytesRead)
					}
					if chunk == 0 && tc.slots > 6 && x.WarmHits == 0 {
						t.Errorf("a cold cache with %d slots: %d warm reads, none asked for; want the first pass to read ahead", tc.slots, x.Warmed)
					}
				}
			})
		}
	}
}

func TestPrefillLimits(t *testing.T) {
	for _, tc := range []struct {
		name              string
		disk, bytes, comp float64
		wantTokS          float64
		wantBinding       string
	}{
		{"disk binds", 4e9, 1e9, 10, 4, "disk"},
		{"compute binds", 4e9, 1e8, 10, 40, "compute"},
		{"nothing read", 4e9, 0, 10, 0, "compute"},
		{"no disk rate", 0, 1e9, 10, 0, ""},
		{"no compute rate", 4e9, 1e9, 0, 4, ""},
	} {
		got, binding := prefillLimits(tc.disk, BenchRun{PrefillBytesPerToken: tc.bytes, PrefillComputeTokS: tc.comp})
		if got != tc.wantTokS || binding != tc.wantBinding {
			t.Errorf("%s: prefillLimits = %v, %q; want %v, %q", tc.name, got, binding, tc.wantTokS, tc.wantBinding)
		}
	}
}

// Warm reads change no bit of qwen38 either (the same expert cache behind
// the same moe contract): a long prompt prefilled with and without them,
// at several budgets, thread and reader counts.
func TestQwen38WarmReadsAreBitwiseInvisible(t *testing.T) {
	dir := install(t, qwen38Layouts[0], 16)
	var prompt []int
	for _, p := range loadRefs(t, "tiny-qwen38.refs.json") {
		prompt = append(prompt, p.IDs...)
	}
	e, err := Load(dir, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	x := e.Install.Manifest.Experts
	e.Close()
	budgets := []struct{ slots, threads, readers int }{{x.TopK + 3, 1, 1}, {x.Count / 2, 2, 4}, {x.Count - 1, 3, 8}}
	if testing.Short() || raceEnabled {
		// The one-thread case races nothing, and the prompt's first 512
		// tokens race as the whole does; scripts/test.sh runs it all
		// without the detector.
		budgets, prompt = budgets[1:], prompt[:min(len(prompt), 512)]
	}
	for _, tc := range budgets {
		t.Run(fmt.Sprintf("%d-slots/%d-threads/%d-readers", tc.slots, tc.threads, tc.readers), func(t *testing.T) {
			opt := Options{Threads: tc.threads, Experts: ExpertOptions{Slots: tc.slots, IOThreads: tc.readers, NoWarm: true}}
			want, _ := prefillRun(t, dir, opt, prompt, 0)
			opt.Experts.NoWarm = false
			got, res := prefillRun(t, dir, opt, prompt, 0)
			if !sameBits(got, want) {
				t.Error("logits differ with warm reads")
			}
			if res.Experts.WarmHits == 0 {
				t.Errorf("%d-token prompt, cold cache of %d of %d slots: %d warm reads, none asked for", len(prompt), tc.slots, x.Count, res.Experts.Warmed)
			}
		})
	}
}

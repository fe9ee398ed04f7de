package runtime

import (
	"context"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/sample"
)

// Sequences decoded together through StepBatch, joining and leaving at
// different steps, each get the ids, text, stop reason and every row of
// logits Generate gives them alone, greedy and seeded.
func TestStepBatchDecodersMatchGenerateAlone(t *testing.T) {
	e, err := Load(install(t, "tiny-moe-fused", 8), Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !e.CanBatch() {
		t.Fatal("the tiny qwen35 CPU engine has no batched step")
	}
	seeded := func(seed uint64) sample.Params {
		return sample.Params{Temperature: 0.9, TopP: 0.9, TopK: 20, Seed: seed}
	}
	type seq struct {
		prompt string
		max    int
		p      sample.Params
		join   int // the batch step at which it starts decoding
	}
	seqs := []seq{
		{"Hello there, how are", 12, sample.Params{TopP: 1}, 0},
		{"The capital of France", 5, seeded(7), 0},
		{"One two three four five six", 9, seeded(3), 2},
		{"Once", 7, sample.Params{TopP: 1}, 4},
	}
	// Each sequence's rows of logits, alone and batched.
	rows := func(into *[][]float32) func([]float32) error {
		return func(r []float32) error { *into = append(*into, slices.Clone(r)); return nil }
	}
	aloneRows, batchRows := make([][][]float32, len(seqs)), make([][][]float32, len(seqs))
	alone := make([]*Result, len(seqs))
	for i, q := range seqs {
		res, err := e.NewSession(SessionOptions{}).Generate(context.Background(), e.Tokenizer.Encode(q.prompt), GenerateOptions{MaxTokens: q.max, Sampling: q.p, IgnoreEOS: true, OnLogits: rows(&aloneRows[i])})
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = res
	}
	ctx := context.Background()
	decs := make([]*Decoder, len(seqs))
	pending := map[*Decoder]int{}
	var results []*Result
	for step := 0; len(results) < len(seqs); step++ {
		for i, q := range seqs {
			if q.join != step {
				continue
			}
			s := e.NewSession(SessionOptions{})
			if err := s.Prefill(ctx, e.Tokenizer.Encode(q.prompt), 3); err != nil {
				t.Fatal(err)
			}
			if decs[i], err = s.NewDecoder(GenerateOptions{MaxTokens: q.max, Sampling: q.p, IgnoreEOS: true, OnLogits: rows(&batchRows[i])}); err != nil {
				t.Fatal(err)
			}
			pending[decs[i]] = -1
		}
		var batch []*Decoder
		var ids []int
		for _, d := range decs {
			if _, ok := pending[d]; !ok || d == nil {
				continue
			}
			id, feed, err := d.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !feed {
				delete(pending, d)
				results = append(results, d.Result())
				continue
			}
			batch, ids = append(batch, d), append(ids, id)
		}
		if len(batch) > 0 {
			if err := e.StepBatch(batch, ids); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, d := range decs {
		got, want := d.Result(), alone[i]
		if !slices.Equal(got.IDs, want.IDs) || got.Text != want.Text || got.StopReason != want.StopReason {
			t.Errorf("sequence %d: batched %v %q %s, alone %v %q %s", i, got.IDs, got.Text, got.StopReason, want.IDs, want.Text, want.StopReason)
		}
		if !sameBits(batchRows[i], aloneRows[i]) {
			t.Errorf("sequence %d: its logits batched differ from its logits alone", i)
		}
	}
	if err := e.StepBatch(decs[:2], []int{1, 2}); err == nil {
		t.Error("StepBatch fed decoders that handed out no token")
	}
}

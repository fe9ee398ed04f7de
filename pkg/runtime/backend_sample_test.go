package runtime

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/runtime/qwen35"
	"github.com/nvmai/nvmai/pkg/runtime/sample"
)

// fakeBackend's states give pseudo-random logits (many ties) that depend on
// the tokens fed so far; candidates says whether they implement
// CandidateState.
type fakeBackend struct {
	V          int
	candidates bool
	topK, rows *int // how many picks each path served
}

type fakeState struct {
	b    *fakeBackend
	ids  []int
	row  []float32
	topK *int
}

type fakeCandState struct{ *fakeState }

func (b *fakeBackend) Name() string { return "fake" }
func (b *fakeBackend) Close()       {}
func (b *fakeBackend) NewState(SessionOptions) (BackendState, error) {
	st := &fakeState{b: b, row: make([]float32, b.V)}
	if b.candidates {
		return fakeCandState{st}, nil
	}
	return st, nil
}

func (s *fakeState) Len() int        { return len(s.ids) }
func (s *fakeState) MaxContext() int { return 1 << 20 }
func (s *fakeState) Close()          {}
func (s *fakeState) Forward(ids []int) error {
	s.ids = append(s.ids, ids...)
	h := uint64(len(s.ids))
	for _, id := range s.ids {
		h = h*1000003 + uint64(id)
	}
	r := rand.New(rand.NewPCG(h, 1))
	for i := range s.row {
		s.row[i] = float32(r.IntN(40)) / 4 // ties at every value
		if r.IntN(30) == 0 {
			s.row[i] = float32(math.Inf(-1))
		}
	}
	return nil
}
func (s *fakeState) Logits(dst []float32) error { *s.b.rows++; copy(dst, s.row); return nil }
func (s *fakeState) Argmax() (int, error)       { return sample.Greedy(s.row) }
func (s fakeCandState) TopK(k int, ids []int32, logits []float32) (int, bool, error) {
	ci, cl := sample.TopKCandidates(s.row, k)
	if len(ci) > len(ids) {
		return 0, false, nil
	}
	*s.b.topK++
	return copy(ids, ci), true, func() error { copy(logits, cl); return nil }()
}

// A backend that lists its top-k candidates gives the sampled tokens of one
// whose rows are copied to the CPU sampler, seed for seed; without a top-k
// filter or with a penalty the session copies the row.
func TestBackendCandidatesSampleAsTheRow(t *testing.T) {
	dir := install(t, "tiny-moe-fused", 4)
	gen := func(candidates bool, p sample.Params) (ids []int, topK, rows int) {
		t.Helper()
		fb := &fakeBackend{candidates: candidates, topK: &topK, rows: &rows}
		e, err := Load(dir, Options{Threads: 1, Backend: func(in *Install, _ qwen35.Config) (Backend, error) {
			fb.V = in.Manifest.Geometry.VocabSize
			return fb, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		s := e.NewSession(SessionOptions{})
		defer s.Close()
		res, err := s.Generate(context.Background(), []int{1, 2, 3}, GenerateOptions{MaxTokens: 40, IgnoreEOS: true, Sampling: p})
		if err != nil {
			t.Fatal(err)
		}
		return res.IDs, topK, rows
	}
	for _, tc := range []struct {
		p        sample.Params
		wantTopK bool
	}{
		{sample.Params{Temperature: 0.7, TopK: 20, TopP: 0.95, Seed: 7}, true},
		{sample.Params{Temperature: 1.2, TopK: 3, Seed: 2}, true},
		{sample.Params{Temperature: 0.9, TopK: 50, MinP: 0.1, Seed: 3}, true},
		{sample.Params{Temperature: 0.7, TopP: 0.95, Seed: 7}, false},
		{sample.Params{Temperature: 0.7, TopK: 20, PresencePenalty: 1, Seed: 7}, false},
	} {
		want, _, _ := gen(false, tc.p)
		got, topK, rows := gen(true, tc.p)
		if !slices.Equal(got, want) {
			t.Errorf("%+v: candidates gave %v, rows %v", tc.p, got, want)
		}
		if tc.wantTopK && (topK != len(got) || rows != 0) || !tc.wantTopK && (topK != 0 || rows != len(got)) {
			t.Errorf("%+v: %d picks from candidates, %d rows copied, for %d tokens", tc.p, topK, rows, len(got))
		}
	}
}

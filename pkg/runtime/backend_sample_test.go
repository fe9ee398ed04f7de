package runtime

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/sample"
)

// nextFake is the fakeBackend the "fake" device loads next.
var (
	nextFake     *fakeBackend
	registerFake sync.Once
)

// loadFake registers the "fake" device (a model.Model that holds its
// experts, as a GPU does) for the fixtures' architecture.
func loadFake(t *testing.T, dir string, fb *fakeBackend) (*Engine, error) {
	t.Helper()
	registerFakeDevice()
	nextFake = fb
	return Load(dir, Options{Threads: 1, Device: "fake"})
}

func registerFakeDevice() {
	registerFake.Do(func() {
		model.Register(qwen35.ArchMoE, "fake", model.Entry{HoldsExperts: true, Footprint: qwen35.Footprint,
			Load: func(req model.Request) (model.Model, error) {
				nextFake.V = req.Manifest.Geometry.VocabSize
				return nextFake, nil
			}})
	})
}

// fakeBackend's states give pseudo-random logits (many ties) that depend on
// the tokens fed so far; sampling says whether they implement SamplingState
// (with sample.Reference; it declines top-p without top-k, as a backend
// may decline any step).
type fakeBackend struct {
	V              int
	sampling       bool
	onDevice, rows *int // how many picks each path served
}

type fakeState struct {
	b   *fakeBackend
	ids []int
	row []float32
}

type fakeSamplingState struct{ *fakeState }

func (b *fakeBackend) Info() model.Info {
	return model.Info{Name: "fake", Device: "fake", VocabSize: b.V, MaxContext: 1 << 20}
}
func (b *fakeBackend) Close() {}
func (b *fakeBackend) NewState(model.StateOptions) (model.State, error) {
	st := &fakeState{b: b, row: make([]float32, b.V)}
	if b.sampling {
		return fakeSamplingState{st}, nil
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
func (s fakeSamplingState) Sample(st sample.Step, history []int32) (int, bool, error) {
	if st.TopP > 0 && st.TopK == 0 {
		return 0, false, nil // declined: the session copies the row
	}
	id, err := sample.Reference(st, history, s.row)
	if err != nil {
		return 0, false, nil // the host reports the broken row
	}
	*s.b.onDevice++
	return id, true, nil
}

// A backend that samples where its logits are gives the tokens of one whose
// rows are copied to the CPU sampler, seed for seed, penalties included; a
// step it declines is sampled from the copied row with the same random
// number.
func TestBackendSamplingIsTheRow(t *testing.T) {
	dir := install(t, "tiny-moe-fused", 4)
	gen := func(sampling bool, p sample.Params) (ids []int, onDevice, rows int) {
		t.Helper()
		fb := &fakeBackend{sampling: sampling, onDevice: &onDevice, rows: &rows}
		e, err := loadFake(t, dir, fb)
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
		return res.IDs, onDevice, rows
	}
	for _, tc := range []struct {
		p          sample.Params
		wantDevice bool
	}{
		{sample.Params{Temperature: 0.7, TopK: 20, TopP: 0.95, Seed: 7}, true},
		{sample.Params{Temperature: 1.2, TopK: 3, Seed: 2}, true},
		{sample.Params{Temperature: 0.9, TopK: 50, MinP: 0.1, Seed: 3}, true},
		{sample.Params{Temperature: 1.1, Seed: 4}, true},
		{sample.Params{Temperature: 0.7, TopK: 20, PresencePenalty: 1, RepetitionPenalty: 1.3, Seed: 7}, true},
		{sample.Params{RepetitionPenalty: 1.5, FrequencyPenalty: 0.5}, true}, // greedy with penalties
		{sample.Params{Temperature: 0.7, TopP: 0.95, Seed: 7}, false},
	} {
		want, _, _ := gen(false, tc.p)
		got, onDevice, rows := gen(true, tc.p)
		if !slices.Equal(got, want) {
			t.Errorf("%+v: the backend's picks %v, rows %v", tc.p, got, want)
		}
		if tc.wantDevice && (onDevice != len(got) || rows != 0) || !tc.wantDevice && (onDevice != 0 || rows != len(got)) {
			t.Errorf("%+v: %d picks on the backend, %d rows copied, for %d tokens", tc.p, onDevice, rows, len(got))
		}
	}
}

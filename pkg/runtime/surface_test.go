package runtime

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
)

// A session over a state without model.Resetter is reset by closing the
// state and making a new one: it then generates what a fresh session does.
func TestResetRemakesAStateThatCannotReset(t *testing.T) {
	dir := install(t, "tiny-moe-fused", 4)
	var onDevice, rows int
	e, err := loadFake(t, dir, &fakeBackend{onDevice: &onDevice, rows: &rows})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	gen := func(s *Session) []int {
		t.Helper()
		res, err := s.Generate(context.Background(), []int{1, 2, 3}, GenerateOptions{MaxTokens: 8, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		return res.IDs
	}
	s := e.NewSession(SessionOptions{})
	defer s.Close()
	first := gen(s)
	old := s.st
	s.Reset()
	if s.Len() != 0 || s.st == old {
		t.Fatalf("after Reset the session holds %d tokens in the same state %v", s.Len(), s.st == old)
	}
	if again := gen(s); !slices.Equal(again, first) {
		t.Errorf("after Reset: %v, a fresh session gave %v", again, first)
	}
}

var errNoRoom = errors.New("no device memory left")

// A state the engine cannot make is reported by the session's first
// Generate or Prefill, not a crash.
func TestSessionReportsAStateThatCouldNotStart(t *testing.T) {
	registerFailing.Do(func() {
		model.Register(qwen35.ArchMoE, "full", model.Entry{HoldsExperts: true, Footprint: qwen35.Footprint,
			Load: func(req model.Request) (model.Model, error) { return fullDevice{req.Manifest.Geometry.VocabSize}, nil }})
	})
	e, err := Load(install(t, "tiny-moe-fused", 4), Options{Threads: 1, Device: "full"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s := e.NewSession(SessionOptions{})
	defer s.Close()
	if _, err := s.Generate(context.Background(), []int{1}, GenerateOptions{MaxTokens: 1}); !errors.Is(err, errNoRoom) {
		t.Errorf("Generate: %v, want %v", err, errNoRoom)
	}
	if err := s.Prefill(context.Background(), []int{1}, 0); !errors.Is(err, errNoRoom) {
		t.Errorf("Prefill: %v, want %v", err, errNoRoom)
	}
	if s.Len() != 0 || s.Snapshot() != nil {
		t.Errorf("a session without a state holds %d tokens, snapshot %v", s.Len(), s.Snapshot())
	}
}

var registerFailing sync.Once

// fullDevice is an engine whose every NewState fails.
type fullDevice struct{ vocab int }

func (d fullDevice) Info() model.Info {
	return model.Info{Name: "full", Device: "full", VocabSize: d.vocab, MaxContext: 1 << 10}
}
func (fullDevice) NewState(model.StateOptions) (model.State, error) { return nil, errNoRoom }
func (fullDevice) Close()                                           {}

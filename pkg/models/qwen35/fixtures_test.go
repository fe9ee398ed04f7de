package qwen35

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/hfsnap"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// quickTests reports whether to run the reduced test set: under -race or
// -short, unless NVMAI_LONG_TESTS=1. The full set adds the long prompts,
// full-length greedy continuations of every prompt and more chunkings.
func quickTests() bool { return testfix.Quick(raceEnabled) }

// pick returns quick in the quick test set, else full.
func pick[T any](quick, full T) T {
	if quickTests() {
		return quick
	}
	return full
}

// fixturesDir is ../shared/fixtures/dev next to the repository root (the
// directory holding go.mod); tests skip when it is absent.
func fixturesDir(t testing.TB) string {
	t.Helper()
	return testfix.Shared(t, "dev")
}

// snapshotWeights serves a Hugging Face fixture snapshot as Weights and
// Experts (internal/testfix/hfsnap: BF16 matrices straight from the file
// bytes, vectors widened, experts sliced out of the fused tensors or taken
// from the per-expert ones). It records every Acquire for the tests.
type snapshotWeights struct {
	*hfsnap.Snapshot

	mu         sync.Mutex
	maxAcquire int     // AcquireLimiter value; 0 = unlimited
	acquires   [][]int // ids of every Acquire call, in call order
	layers     []int   // layer of every Acquire call
	live       int     // acquired batches not yet released
}

// loadSnapshot reads every *.safetensors file of dir into memory (once per
// test binary).
func loadSnapshot(t testing.TB, dir string) *snapshotWeights {
	t.Helper()
	return &snapshotWeights{Snapshot: hfsnap.Load(t, dir)}
}

// widen decodes BF16 or F32 little-endian bytes.
var widen = hfsnap.Widen

func (s *snapshotWeights) MaxAcquire() int { return s.maxAcquire }

func (s *snapshotWeights) Acquire(layer int, ids []int) ([]model.ExpertMats, func(), error) {
	mats, err := s.Experts(layer, ids)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	s.acquires = append(s.acquires, append([]int(nil), ids...))
	s.layers = append(s.layers, layer)
	s.live++
	s.mu.Unlock()
	var once sync.Once
	return mats, func() {
		once.Do(func() { s.mu.Lock(); s.live--; s.mu.Unlock() })
	}, nil
}

// fixtureConfig reads config.json's text_config into a Geometry and builds
// the Config, as the converter will.
func fixtureConfig(t testing.TB, dir string) Config {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top struct {
		ModelType  string          `json:"model_type"`
		TextConfig json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	var g packexperts.Geometry
	if err := json.Unmarshal(top.TextConfig, &g); err != nil {
		t.Fatal(err)
	}
	var rope struct {
		RopeParameters struct {
			RopeTheta           float64 `json:"rope_theta"`
			PartialRotaryFactor float64 `json:"partial_rotary_factor"`
		} `json:"rope_parameters"`
	}
	if err := json.Unmarshal(top.TextConfig, &rope); err != nil {
		t.Fatal(err)
	}
	g.RopeTheta = rope.RopeParameters.RopeTheta
	g.PartialRotaryFactor = rope.RopeParameters.PartialRotaryFactor
	cfg, err := ConfigFromGeometry(top.ModelType, g)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// refPrompt is one prompt of a *.refs.json file.
type refPrompt = testfix.RefPrompt

// The shared fixture helpers, under this package's names.
var (
	loadRefs   = testfix.LoadRefs
	argmax     = testfix.Argmax
	logsumexp  = testfix.Logsumexp
	maxAbsDiff = testfix.MaxAbsDiff
)

// fixtureModel is a model over one fixture snapshot.
type fixtureModel struct {
	name  string // "tiny-moe" or "tiny-dense"
	dir   string
	refs  string
	trace string
}

var fixtureModels = []fixtureModel{
	{name: "tiny-moe", dir: "tiny-moe-fused", refs: "tiny-moe.refs.json", trace: "tiny-moe-fused.trace.safetensors"},
	{name: "tiny-dense", dir: "tiny-dense", refs: "tiny-dense.refs.json", trace: "tiny-dense.trace.safetensors"},
}

// open builds the model with the given pool; the snapshotWeights is
// returned too so tests can inspect Acquire calls.
func (fm fixtureModel) open(t testing.TB, pool *kernels.Pool) (*Model, *snapshotWeights) {
	t.Helper()
	fx := fixturesDir(t)
	dir := filepath.Join(fx, fm.dir)
	sw := loadSnapshot(t, dir)
	m, err := New(fixtureConfig(t, dir), sw, sw, pool)
	if err != nil {
		t.Fatal(err)
	}
	return m, sw
}

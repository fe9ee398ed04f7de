package qwen35

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

// quickTests reports whether to run the reduced test set: under -race or
// -short, unless NVMAI_LONG_TESTS=1. The full set adds the long prompts,
// full-length greedy continuations of every prompt and more chunkings.
func quickTests() bool {
	if os.Getenv("NVMAI_LONG_TESTS") != "" {
		return false
	}
	return raceEnabled || testing.Short()
}

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

// rawTensor is one tensor of a snapshot held in memory.
type rawTensor struct {
	dtype safetensors.DType
	shape []int64
	data  []byte
}

// snapshotWeights serves a Hugging Face fixture snapshot as Weights and
// Experts: BF16 matrices straight from the file bytes, vectors widened, and
// experts sliced out of the fused [E, 2I, H] / [E, H, I] tensors (or taken
// from the per-expert tensors). It records every Acquire for the tests.
type snapshotWeights struct {
	tensors map[string]rawTensor // by Hugging Face name

	mu         sync.Mutex
	maxAcquire int     // AcquireLimiter value; 0 = unlimited
	acquires   [][]int // ids of every Acquire call, in call order
	layers     []int   // layer of every Acquire call
	live       int     // acquired batches not yet released
}

var snapshotCache sync.Map // dir → map[string]rawTensor

// loadSnapshot reads every *.safetensors file of dir into memory (once per
// test binary).
func loadSnapshot(t testing.TB, dir string) *snapshotWeights {
	t.Helper()
	if v, ok := snapshotCache.Load(dir); ok {
		return &snapshotWeights{tensors: v.(map[string]rawTensor)}
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no safetensors shards in %s (%v)", dir, err)
	}
	tensors := map[string]rawTensor{}
	for _, p := range paths {
		f, err := safetensors.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range f.Header().Tensors {
			buf := make([]byte, ti.Size())
			if err := f.ReadTensor(ti, buf); err != nil {
				t.Fatal(err)
			}
			tensors[ti.Name] = rawTensor{dtype: ti.DType, shape: ti.Shape, data: buf}
		}
		f.Close()
	}
	snapshotCache.Store(dir, tensors)
	return &snapshotWeights{tensors: tensors}
}

// hfName maps a canonical name back to the checkpoint's.
func hfName(canonical string) string {
	if rest, ok := strings.CutPrefix(canonical, "model."); ok {
		return "model.language_model." + rest
	}
	return canonical
}

func (s *snapshotWeights) Has(name string) bool {
	_, ok := s.tensors[hfName(name)]
	return ok
}

func (s *snapshotWeights) tensor(name string) (rawTensor, error) {
	rt, ok := s.tensors[hfName(name)]
	if !ok {
		return rawTensor{}, fmt.Errorf("not in the snapshot (as %s)", hfName(name))
	}
	return rt, nil
}

func (s *snapshotWeights) Matrix(name string) (*kernels.Matrix, error) {
	rt, err := s.tensor(name)
	if err != nil {
		return nil, err
	}
	if len(rt.shape) != 2 {
		return nil, fmt.Errorf("shape %v is not 2-D", rt.shape)
	}
	return matrixOf(rt.dtype, int(rt.shape[0]), int(rt.shape[1]), rt.data)
}

func matrixOf(dt safetensors.DType, rows, cols int, data []byte) (*kernels.Matrix, error) {
	enc := map[safetensors.DType]kernels.Encoding{safetensors.BF16: kernels.BF16, safetensors.F16: kernels.F16, safetensors.F32: kernels.F32}
	e, ok := enc[dt]
	if !ok {
		return nil, fmt.Errorf("dtype %s is not a float matrix", dt)
	}
	return &kernels.Matrix{Rows: rows, Cols: cols, Enc: e, Data: data}, nil
}

func (s *snapshotWeights) Vector(name string) ([]float32, error) {
	rt, err := s.tensor(name)
	if err != nil {
		return nil, err
	}
	return widen(rt.dtype, rt.data)
}

// widen decodes BF16 or F32 little-endian bytes.
func widen(dt safetensors.DType, b []byte) ([]float32, error) {
	switch dt {
	case safetensors.BF16:
		out := make([]float32, len(b)/2)
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
		return out, nil
	case safetensors.F32:
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("dtype %s cannot be widened", dt)
}

func (s *snapshotWeights) MaxAcquire() int { return s.maxAcquire }

func (s *snapshotWeights) Acquire(layer int, ids []int) ([]ExpertMats, func(), error) {
	mats := make([]ExpertMats, len(ids))
	for i, e := range ids {
		em, err := s.expert(layer, e)
		if err != nil {
			return nil, nil, err
		}
		mats[i] = em
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

// expert slices expert e of layer out of the fused tensors (docs §2.3:
// gate rows [0, I), up rows [I, 2I), no transpose), or reads the
// per-expert tensors when the snapshot has those.
func (s *snapshotWeights) expert(layer, e int) (ExpertMats, error) {
	prefix := fmt.Sprintf("model.language_model.layers.%d.mlp.experts.", layer)
	gu, fused := s.tensors[prefix+"gate_up_proj"]
	if !fused {
		var em ExpertMats
		for _, p := range []struct {
			dst  **kernels.Matrix
			name string
		}{{&em.Gate, "gate_proj"}, {&em.Up, "up_proj"}, {&em.Down, "down_proj"}} {
			m, err := s.Matrix(fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s.weight", layer, e, p.name))
			if err != nil {
				return ExpertMats{}, fmt.Errorf("expert %d %s: %w", e, p.name, err)
			}
			*p.dst = m
		}
		return em, nil
	}
	down := s.tensors[prefix+"down_proj"]
	E, twoI, H := int(gu.shape[0]), int(gu.shape[1]), int(gu.shape[2])
	if e < 0 || e >= E {
		return ExpertMats{}, fmt.Errorf("expert %d of %d", e, E)
	}
	I := twoI / 2
	es := 2 // bytes per BF16 element
	base := e * twoI * H * es
	gate, _ := matrixOf(gu.dtype, I, H, gu.data[base:base+I*H*es])
	up, _ := matrixOf(gu.dtype, I, H, gu.data[base+I*H*es:base+2*I*H*es])
	db := e * H * I * es
	dn, _ := matrixOf(down.dtype, H, I, down.data[db:db+H*I*es])
	return ExpertMats{Gate: gate, Up: up, Down: dn}, nil
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
type refPrompt struct {
	Text                 string    `json:"text"`
	IDs                  []int     `json:"ids"`
	LastLogits           []float32 `json:"last_logits"`
	ArgmaxPerPosition    []int     `json:"argmax_per_position"`
	LogsumexpPerPosition []float64 `json:"logsumexp_per_position"`
	Greedy               []int     `json:"greedy"`
}

func loadRefs(t testing.TB, path string) []refPrompt {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var refs struct {
		Prompts []refPrompt `json:"prompts"`
	}
	if err := json.Unmarshal(raw, &refs); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return refs.Prompts
}

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

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

func logsumexp(x []float32) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	return m + math.Log(s)
}

func maxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

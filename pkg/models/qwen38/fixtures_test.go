package qwen38

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/hfsnap"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
)

// quickTests reports whether to run the reduced test set (under -race or
// -short, unless NVMAI_LONG_TESTS=1): the 850-token prompt is then cut to
// its first 120 tokens (still 109 queries past the dense window).
func quickTests() bool { return testfix.Quick(raceEnabled) }

// quickIDs cuts a long prompt in the quick test set.
func quickIDs(ids []int) []int {
	if quickTests() && len(ids) > 120 {
		return ids[:120]
	}
	return ids
}

// The two dev layouts of the same trained tiny Qwen3.8 (fixtures README).
var layouts = []string{"tiny-qwen38-fused", "tiny-qwen38-perexpert"}

func fixturesDir(t testing.TB) string {
	t.Helper()
	return testfix.Shared(t, "dev")
}

// snapshot serves a Hugging Face fixture snapshot straight from its
// safetensors files: Weights (BF16 matrices as stored, vectors widened),
// Int64Weights and the expert slicing from internal/testfix/hfsnap, and
// the n-gram table (its shards concatenated in shard order).
type snapshot struct {
	*hfsnap.Snapshot
	table []float32 // the PLE layer's concatenated table [R_tab, dr]
	dr    int
}

var snapshots sync.Map

func loadSnapshot(t testing.TB, dir string) *snapshot {
	t.Helper()
	if v, ok := snapshots.Load(dir); ok {
		return v.(*snapshot)
	}
	s := &snapshot{Snapshot: hfsnap.Load(t, dir)}
	const shard = "model.language_model.layers.1.ple.ple_embedding.ngram_embedding.shard_%d.weight"
	for i := 0; ; i++ {
		rt, ok := s.Tensors[fmt.Sprintf(shard, i)]
		if !ok {
			break
		}
		v, err := widen(rt.DType, rt.Data)
		if err != nil {
			t.Fatal(err)
		}
		s.dr = int(rt.Shape[1])
		s.table = append(s.table, v...)
	}
	snapshots.Store(dir, s)
	return s
}

// widen decodes BF16 or F32 little-endian bytes.
var widen = hfsnap.Widen

func (s *snapshot) Rows(ple int, ids []int64, dst []float32) error {
	if ple != 0 {
		return fmt.Errorf("PLE layer %d: the fixture has one", ple)
	}
	for i, id := range ids {
		if id < 0 || int(id+1)*s.dr > len(s.table) {
			return fmt.Errorf("row %d outside the table", id)
		}
		copy(dst[i*s.dr:(i+1)*s.dr], s.table[int(id)*s.dr:int(id+1)*s.dr])
	}
	return nil
}

func (s *snapshot) Acquire(layer int, ids []int) ([]model.ExpertMats, func(), error) {
	mats, err := s.Experts(layer, ids)
	if err != nil {
		return nil, nil, err
	}
	return mats, func() {}, nil
}

// textConfig is config.json's text_config as transformers 5.17 reads it.
type textConfig struct {
	VocabSize, HiddenSize, NumHiddenLayers, MaxPositionEmbeddings int
	LayerTypes                                                    []string
	RMSNormEps                                                    float64
	HcCount, HcLowrank                                            int
	NumAttentionHeads, NumKeyValueHeads, HeadDim                  int
	RopeParameters                                                struct {
		RopeTheta           float64  `json:"rope_theta"`
		PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
	}
	IndexerNHeads, IndexerHeadDim, IndexerBudget, IndexerCompressRatio, IndexerKVHeads int
	LinearConvKernelDim, LinearNumKeyHeads, LinearNumValueHeads                        int
	LinearKeyHeadDim, LinearValueHeadDim                                               int
	OutputGateType                                                                     string
	NumExperts, NumExpertsPerTok, MoeIntermediateSize, SharedExpertIntermediateSize    int
	PleLayerIds                                                                        []int
	PleEmbedDim, PleConvKernelSize, NgramSize, HeadsPerNgram                           int
	NgramVocabSizeBase, MakeNgramVocabSizeDivisibleBy, Seed                            int64
	EOSTokenID                                                                         json.RawMessage
}

// fixtureConfig builds the Config of a fixture snapshot.
func fixtureConfig(t testing.TB, dir string) Config {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top struct {
		TextConfig json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	var tc textConfig
	if err := json.Unmarshal(snakeToCamel(t, top.TextConfig), &tc); err != nil {
		t.Fatal(err)
	}
	prf := 1.0
	if tc.RopeParameters.PartialRotaryFactor != nil {
		prf = *tc.RopeParameters.PartialRotaryFactor
	}
	var eos int
	var eosList []int
	if json.Unmarshal(tc.EOSTokenID, &eos) != nil {
		if err := json.Unmarshal(tc.EOSTokenID, &eosList); err != nil || len(eosList) == 0 {
			t.Fatalf("eos_token_id %s", tc.EOSTokenID)
		}
		eos = eosList[0]
	}
	c := Config{
		VocabSize: tc.VocabSize, HiddenSize: tc.HiddenSize, RMSNormEps: float32(tc.RMSNormEps),
		MaxContext: tc.MaxPositionEmbeddings, Streams: tc.HcCount, LowRank: tc.HcLowrank,
		NumHeads: tc.NumAttentionHeads, NumKVHeads: tc.NumKeyValueHeads, HeadDim: tc.HeadDim,
		RopeTheta: tc.RopeParameters.RopeTheta, RotaryDim: int(float64(tc.HeadDim) * prf),
		IndexerHeads: tc.IndexerNHeads, IndexerDim: tc.IndexerHeadDim, IndexerBudget: tc.IndexerBudget,
		IndexerBlock: tc.IndexerCompressRatio, ConvKernel: tc.LinearConvKernelDim,
		LinearKeyHeads: tc.LinearNumKeyHeads, LinearValueHeads: tc.LinearNumValueHeads,
		LinearKeyDim: tc.LinearKeyHeadDim, LinearValueDim: tc.LinearValueHeadDim,
		SigmoidGate: tc.OutputGateType == "sigmoid", NumExperts: tc.NumExperts, ExpertsPerToken: tc.NumExpertsPerTok,
		ExpertIntermediate: tc.MoeIntermediateSize, SharedIntermediate: tc.SharedExpertIntermediateSize,
		PLEDim: tc.PleEmbedDim, PLEConvKernel: tc.PleConvKernelSize, NgramSize: tc.NgramSize,
		HeadsPerNgram: tc.HeadsPerNgram, NgramVocabBase: tc.NgramVocabSizeBase,
		NgramRowsDivide: tc.MakeNgramVocabSizeDivisibleBy, Seed: tc.Seed, EOS: eos,
	}
	for _, id := range tc.PleLayerIds {
		c.PLELayers = append(c.PLELayers, id-1)
	}
	for _, s := range tc.LayerTypes {
		k, err := ParseLayerKind(s)
		if err != nil {
			t.Fatal(err)
		}
		c.Layers = append(c.Layers, k)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// snakeToCamel rewrites the top-level keys of a JSON object from snake_case
// to the CamelCase of textConfig's fields (encoding/json matches them
// case-insensitively).
func snakeToCamel(t testing.TB, raw []byte) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	out := map[string]json.RawMessage{}
	for k, v := range m {
		out[strings.ReplaceAll(k, "_", "")] = v
	}
	b, _ := json.Marshal(out)
	return b
}

// open builds the model of one layout on pool.
func open(t testing.TB, layout string, pool *kernels.Pool) *Model {
	t.Helper()
	dir := filepath.Join(fixturesDir(t), layout)
	s := loadSnapshot(t, dir)
	m, err := New(fixtureConfig(t, dir), s, s, s, pool)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type refPrompt = testfix.RefPrompt

func loadRefs(t testing.TB) []refPrompt {
	t.Helper()
	return testfix.LoadRefs(t, filepath.Join(fixturesDir(t), "tiny-qwen38.refs.json"))
}

// The shared fixture helpers, under this package's names.
var (
	argmax      = testfix.Argmax
	maxAbsDiff  = testfix.MaxAbsDiff
	bitwiseDiff = testfix.BitwiseDiff
)

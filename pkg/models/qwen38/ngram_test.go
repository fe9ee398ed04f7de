package qwen38

import (
	"slices"
	"strings"
	"testing"
)

// TestNgramConstants recomputes the hashing constants that
// docs/qwen38-architecture.md §3.4 lists for the release (transformers
// 5.17's own functions gave them) and for the tiny fixture.
func TestNgramConstants(t *testing.T) {
	base := Config{NgramSize: 3, HeadsPerNgram: 8, Seed: 1234, NgramRowsDivide: 128}
	release := base
	release.VocabSize, release.NgramVocabBase = 248320, 20_000_000
	nc := newNgramConsts(release, 0)
	if want := []int64{23703573157769, 20109073645365, 8052911324071}; !slices.Equal(nc.mult, want) {
		t.Errorf("release multipliers %v, want %v", nc.mult, want)
	}
	wantP := []int64{20000003, 20000023, 20000033, 20000047, 20000059, 20000063, 20000069, 20000077, 20000081,
		20000093, 20000107, 20000147, 20000153, 20000159, 20000161, 20000171}
	if !slices.Equal(nc.primes, wantP) {
		t.Errorf("release primes %v, want %v", nc.primes, wantP)
	}
	if nc.offsets[1] != 20000003 || nc.offsets[2] != 40000026 || nc.offsets[15] != 300001275 || nc.rows != 320001536 {
		t.Errorf("release offsets %v, rows %d", nc.offsets, nc.rows)
	}
	if second := newNgramConsts(release, 1); second.primes[0] != 20000213 {
		t.Errorf("a second PLE layer starts at prime %d, want 20000213", second.primes[0])
	}
	tiny := base
	tiny.VocabSize, tiny.NgramVocabBase = 4160, 1000
	nc = newNgramConsts(tiny, 0)
	if want := []int64{1523712965244179, 1088687192982243, 2102351738803459}; !slices.Equal(nc.mult, want) {
		t.Errorf("tiny multipliers %v, want %v", nc.mult, want)
	}
	if nc.primes[0] != 1009 || nc.primes[15] != 1097 || nc.rows != 16896 {
		t.Errorf("tiny primes %v, rows %d", nc.primes, nc.rows)
	}
}

// TestNgramContextResets: after an EOS the context is EOS for every order,
// the EOS token keeps its own context, and a fresh sequence behaves as if
// preceded by EOS (§3.4), checked against the definition written out.
func TestNgramContextResets(t *testing.T) {
	const eos = 9
	c := Config{VocabSize: 16, NgramSize: 4, HeadsPerNgram: 1, Seed: 1, NgramVocabBase: 1 << 20, NgramRowsDivide: 1, EOS: eos}
	nc := newNgramConsts(c, 0)
	ids := []int{3, 4, 9, 5, 6, 7, 9, 9, 2, 8}
	h := newNgramHistory(c)
	var got []int64
	for _, id := range ids {
		got = nc.rowIDs(got, h, id, eos, 1)
	}
	for p, id := range ids {
		mix := int64(id) * nc.mult[0]
		for s := 1; s < c.NgramSize; s++ {
			ctx := eos
			if p-s >= 0 && !slices.Contains(ids[p-s:p], eos) {
				ctx = ids[p-s]
			}
			mix ^= int64(ctx) * nc.mult[s]
			if want := mix%nc.primes[s-1] + nc.offsets[s-1]; got[p*3+s-1] != want {
				t.Fatalf("token %d order %d: row %d, want %d", p, s+1, got[p*3+s-1], want)
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{VocabSize: 100, HiddenSize: 8, Layers: []LayerKind{LinearAttention, SparseAttention}, RMSNormEps: 1e-6,
		MaxContext: 64, Streams: 4, LowRank: 2, NumHeads: 2, NumKVHeads: 1, HeadDim: 8, RopeTheta: 1e4, RotaryDim: 4,
		IndexerHeads: 2, IndexerDim: 4, IndexerBudget: 8, IndexerBlock: 4, ConvKernel: 4, LinearKeyHeads: 1,
		LinearValueHeads: 2, LinearKeyDim: 4, LinearValueDim: 4, NumExperts: 4, ExpertsPerToken: 2,
		ExpertIntermediate: 4, SharedIntermediate: 4, PLELayers: []int{0}, PLEDim: 8, PLEConvKernel: 4, NgramSize: 3,
		HeadsPerNgram: 2, NgramVocabBase: 10, NgramRowsDivide: 8, Seed: 1, EOS: 99}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Streams = 1 }, "hc_count"},
		{func(c *Config) { c.IndexerHeads = 0 }, "indexer_n_heads"},
		{func(c *Config) { c.IndexerBudget = 6 }, "indexer_budget"},
		{func(c *Config) { c.RotaryDim, c.IndexerDim = 8, 4 }, "indexer_head_dim"},
		{func(c *Config) { c.PLELayers = []int{1} }, "not a linear_attention"},
		{func(c *Config) { c.PLELayers = []int{2} }, "ple_layer_ids"},
		{func(c *Config) { c.PLEDim = 6 }, "ple_embed_dim"},
		{func(c *Config) { c.EOS = 100 }, "eos_token_id"},
		{func(c *Config) { c.ExpertsPerToken = 5 }, "exceeds"},
	} {
		c := good
		c.PLELayers = slices.Clone(good.PLELayers)
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error naming %q, got %v", tc.want, err)
		}
	}
	for _, s := range []string{"full_attention", "qwen_sparse_attention"} {
		if k, err := ParseLayerKind(s); err != nil || k != SparseAttention {
			t.Errorf("%s: %v %v", s, k, err)
		}
	}
	if _, err := ParseLayerKind("indexed_attention"); err == nil {
		t.Error("indexed_attention accepted; 5.17 rejects it")
	}
}

// tamperedI64 serves a snapshot with one stored hashing constant changed.
type tamperedI64 struct{ *snapshot }

func (s tamperedI64) Int64s(name string) ([]int64, error) {
	v, err := s.snapshot.Int64s(name)
	if err == nil && strings.HasSuffix(name, "ngram_heads_offsets") {
		v = slices.Clone(v)
		v[3]++
	}
	return v, err
}

// TestNewRefusesForeignHashConstants: a checkpoint whose I64 buffers differ
// from what its config gives is refused, naming the tensor.
func TestNewRefusesForeignHashConstants(t *testing.T) {
	dir := fixturesDir(t) + "/" + layouts[0]
	s := loadSnapshot(t, dir)
	_, err := New(fixtureConfig(t, dir), tamperedI64{s}, s, s, nil)
	if err == nil || !strings.Contains(err.Error(), "ngram_heads_offsets[3]") {
		t.Fatalf("got %v, want an error naming ngram_heads_offsets[3]", err)
	}
}

// TestReleaseGeometry: the release config of docs §1.2 validates and its
// derived values are those §1.3 and §4 state.
func TestReleaseGeometry(t *testing.T) {
	layers := make([]LayerKind, 48)
	for i := 3; i < 48; i += 4 {
		layers[i] = SparseAttention
	}
	c := Config{VocabSize: 248320, HiddenSize: 2560, Layers: layers, RMSNormEps: 1e-6, MaxContext: 262144,
		Streams: 4, LowRank: 320, NumHeads: 24, NumKVHeads: 2, HeadDim: 256, RopeTheta: 1e7, RotaryDim: 64,
		IndexerHeads: 4, IndexerDim: 128, IndexerBudget: 2048, IndexerBlock: 4, ConvKernel: 4,
		LinearKeyHeads: 16, LinearValueHeads: 48, LinearKeyDim: 128, LinearValueDim: 128, SigmoidGate: true,
		NumExperts: 512, ExpertsPerToken: 10, ExpertIntermediate: 640, SharedIntermediate: 640,
		PLELayers: []int{1}, PLEDim: 2560, PLEConvKernel: 4, NgramSize: 3, HeadsPerNgram: 8,
		NgramVocabBase: 20_000_000, NgramRowsDivide: 128, Seed: 1234, EOS: 248044}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.ConvChannels() != 10240 || c.StreamWidth() != 10240 || c.NgramHeads() != 16 || c.NgramRowWidth() != 160 ||
		c.IndexerBlocks() != 512 || c.NgramRows(0) != 320001536 {
		t.Errorf("derived values C %d, S·H %d, NH %d, dr %d, B %d, rows %d", c.ConvChannels(), c.StreamWidth(),
			c.NgramHeads(), c.NgramRowWidth(), c.IndexerBlocks(), c.NgramRows(0))
	}
	// §4: GDN conv 4.2 MiB + recurrent 108 MiB, PLE conv 360 KiB; KV 24 KiB
	// per token in bf16 is 48 KiB in float32, plus the indexer keys.
	if got, want := c.FixedStateBytes(), int64(36*(3*10240+48*128*128)*4+9*10240*4); got != want {
		t.Errorf("fixed state %d bytes, want %d", got, want)
	}
	// Per attention layer and token, K and V at the width (int8: one scale
	// per 64 values), and the float32 indexer keys: 4 raw, 1 block key.
	for bits, kv := range map[int]int64{32: 2 * 4 * 512, 16: 2 * 2 * 512, 8: 2 * (512 + 4*512/64)} {
		if got, want := c.KVBytes(4, bits), 12*(4*kv+4*(4*128+128)); got != want {
			t.Errorf("KV of 4 tokens at %d bits: %d bytes, want %d", bits, got, want)
		}
	}
}

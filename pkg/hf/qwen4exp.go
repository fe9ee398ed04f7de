package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

// ArchQwen4Exp is Qwen3.8-Flash-Next (../shared/docs/qwen38-architecture.md,
// "q38 §n" below; the install layout is docs/qwen38.md).
const ArchQwen4Exp = packexperts.ArchQwen4Exp

// SparseAttention is what transformers 5.17 renames full_attention to in a
// qwen4_exp config; both spellings mean gated attention with the indexer.
const SparseAttention = "qwen_sparse_attention"

// qwen4ModelTypes: the vision-language form nests the decoder in text_config.
var qwen4ModelTypes = map[string]bool{"qwen4_exp": true, "qwen4_exp_text": false}

// 5.17 dataclass defaults (q38 §1.2) for fields that may be absent.
const (
	q4DefaultHCCount        = 4
	q4DefaultHCLowRank      = 320
	q4DefaultPLEConvKernel  = 4
	q4DefaultNGramSize      = 3
	q4DefaultHeadsPerNGram  = 8
	q4DefaultNGramVocabBase = 20_000_000
	q4DefaultDivisibleBy    = 128
	q4DefaultSeed           = 1234
	q4DefaultSplitParts     = 512
	q4DefaultRopeTheta      = 10000.0
	q4DefaultPartialRotary  = 1.0
)

// Ceilings for qwen4_exp fields without a natural bound in maxConfigDim.
const (
	maxHCCount       = 64
	maxConvKernel    = 64
	maxSplitParts    = 1 << 20
	maxNGramShardIdx = maxSplitParts
)

// qwen4TextConfig is a qwen4_exp text_config: the qwen3_5_moe fields plus
// hyper-connections, PLE and the QSA indexer. Pointers tell absent from zero.
type qwen4TextConfig struct {
	textConfig
	OutputGateType       *string         `json:"output_gate_type"`
	NormTopKProb         *bool           `json:"norm_topk_prob"`
	HCCount              *int            `json:"hc_count"`
	HCLowRank            *int            `json:"hc_lowrank"`
	PLELayerIDs          []int           `json:"ple_layer_ids"`
	PLEEmbedDim          *int            `json:"ple_embed_dim"`
	PLEConvKernelSize    *int            `json:"ple_conv_kernel_size"`
	NGramSize            *int            `json:"ngram_size"`
	HeadsPerNGram        *int            `json:"heads_per_ngram"`
	NGramVocabSizeBase   *int64          `json:"ngram_vocab_size_base"`
	DivisibleBy          *int64          `json:"make_ngram_vocab_size_divisible_by"`
	Seed                 *int64          `json:"seed"`
	SplitNGramParts      *int            `json:"split_ngram_parts"`
	IndexerNHeads        *int            `json:"indexer_n_heads"`
	IndexerKVHeads       *int            `json:"indexer_kv_heads"`
	IndexerHeadDim       *int            `json:"indexer_head_dim"`
	IndexerBudget        *int            `json:"indexer_budget"`
	IndexerCompressRatio *int            `json:"indexer_compress_ratio"`
	EOSTokenID           json.RawMessage `json:"eos_token_id"`
}

// parseQwen4Exp reads a qwen4_exp (or qwen4_exp_text) config.json.
func parseQwen4Exp(data []byte, top topConfig, nested bool, name string) (string, packexperts.Geometry, error) {
	var g packexperts.Geometry
	text := data
	if nested {
		if len(top.TextConfig) == 0 || string(top.TextConfig) == "null" {
			return "", g, fmt.Errorf("%s: model_type %q needs a text_config object, which is missing", name, top.ModelType)
		}
		text = top.TextConfig
	}
	var tc qwen4TextConfig
	if err := unmarshalObject(text, &tc); err != nil {
		return "", g, fmt.Errorf("%s: text_config: %v", name, err)
	}
	if nested && tc.ModelType != "" && tc.ModelType != "qwen4_exp_text" {
		return "", g, fmt.Errorf("%s: text_config.model_type %q does not match model_type %q (want \"qwen4_exp_text\")", name, tc.ModelType, top.ModelType)
	}
	if nested && top.TieWordEmbeddings != nil {
		if tc.TieWordEmbeddings != nil && *tc.TieWordEmbeddings != *top.TieWordEmbeddings {
			return "", g, fmt.Errorf("%s: tie_word_embeddings is %v at the top level but %v in text_config; fix the config so they agree", name, *top.TieWordEmbeddings, *tc.TieWordEmbeddings)
		}
		tc.TieWordEmbeddings = top.TieWordEmbeddings
	}
	g, err := tc.geometry()
	if err != nil {
		return "", g, fmt.Errorf("%s: %v", name, err)
	}
	return ArchQwen4Exp, g, nil
}

func (tc *qwen4TextConfig) geometry() (packexperts.Geometry, error) {
	// 5.17's defaults where they differ from qwen3_5's (q38 §1.3), applied
	// before the shared parser reads the fields.
	if tc.RopeParameters == nil && tc.RopeScaling == nil && tc.RopeTheta == nil {
		theta := q4DefaultRopeTheta
		tc.RopeTheta = &theta
	}
	inside := tc.RopeParameters != nil && tc.RopeParameters.PartialRotaryFactor != nil
	if !inside && tc.PartialRotaryFactor == nil {
		prf := q4DefaultPartialRotary
		tc.PartialRotaryFactor = &prf
	}
	if err := tc.normaliseLayerTypes(); err != nil {
		return packexperts.Geometry{}, err
	}
	g, err := tc.textConfig.geometry(ArchMoE)
	if err != nil {
		return g, err
	}
	v := &validator{}
	q := &packexperts.Qwen4ExpGeometry{
		HCCount:                   sizeOr(v, "hc_count", tc.HCCount, q4DefaultHCCount, maxHCCount),
		HCLowRank:                 sizeOr(v, "hc_lowrank", tc.HCLowRank, q4DefaultHCLowRank, maxConfigDim),
		OutputGateType:            orDefault(tc.OutputGateType, g.HiddenAct),
		NormTopKProb:              orDefault(tc.NormTopKProb, true),
		PLEEmbedDim:               sizeOr(v, "ple_embed_dim", tc.PLEEmbedDim, g.HiddenSize, maxConfigDim),
		PLEConvKernelSize:         sizeOr(v, "ple_conv_kernel_size", tc.PLEConvKernelSize, q4DefaultPLEConvKernel, maxConvKernel),
		NGramSize:                 sizeOr(v, "ngram_size", tc.NGramSize, q4DefaultNGramSize, packexperts.MaxNGramSize),
		HeadsPerNGram:             sizeOr(v, "heads_per_ngram", tc.HeadsPerNGram, q4DefaultHeadsPerNGram, packexperts.MaxHeadsPerNGram),
		NGramVocabSizeBase:        int64Or(v, "ngram_vocab_size_base", tc.NGramVocabSizeBase, q4DefaultNGramVocabBase, 2, packexperts.MaxNGramVocabBase),
		NGramVocabSizeDivisibleBy: int64Or(v, "make_ngram_vocab_size_divisible_by", tc.DivisibleBy, q4DefaultDivisibleBy, 1, packexperts.MaxNGramDivisor),
		Seed:                      orDefault(tc.Seed, q4DefaultSeed),
		SplitNGramParts:           sizeOr(v, "split_ngram_parts", tc.SplitNGramParts, q4DefaultSplitParts, maxSplitParts),
		IndexerNHeads:             v.size("indexer_n_heads", tc.IndexerNHeads),
		IndexerKVHeads:            v.size("indexer_kv_heads", tc.IndexerKVHeads),
		IndexerHeadDim:            v.size("indexer_head_dim", tc.IndexerHeadDim),
		IndexerBudget:             v.size("indexer_budget", tc.IndexerBudget),
		IndexerCompressRatio:      v.size("indexer_compress_ratio", tc.IndexerCompressRatio),
	}
	if v.err != nil {
		return g, fmt.Errorf("%v (qwen4_exp builds the QSA indexer on every attention layer, so all five indexer_* fields are required)", v.err)
	}
	tc.checkQwen4(&g, q, v)
	q.PLELayers = tc.pleLayers(&g, v)
	q.PLEResetTokenID = tc.resetToken(&g, len(q.PLELayers) > 0, v)
	if v.err != nil {
		return g, v.err
	}
	g.Qwen4Exp = q
	if err := g.Validate(ArchQwen4Exp); err != nil {
		return g, err
	}
	return g, nil
}

// normaliseLayerTypes stores both spellings of the attention layer as
// full_attention and names any other type.
func (tc *qwen4TextConfig) normaliseLayerTypes() error {
	for i, t := range tc.LayerTypes {
		switch t {
		case LinearAttention, FullAttention:
		case SparseAttention:
			tc.LayerTypes[i] = FullAttention
		default:
			return fmt.Errorf("layer_types[%d] is %q; qwen4_exp has %q and %q (or %q)", i, t, LinearAttention, FullAttention, SparseAttention)
		}
	}
	return nil
}

// checkQwen4 reproduces 5.17's validation (q38 §1.3) as errors naming the field.
func (tc *qwen4TextConfig) checkQwen4(g *packexperts.Geometry, q *packexperts.Qwen4ExpGeometry, v *validator) {
	rd := int(float64(g.HeadDim) * g.PartialRotaryFactor)
	nh := (q.NGramSize - 1) * q.HeadsPerNGram
	switch {
	case q.OutputGateType != "sigmoid" && q.OutputGateType != "silu":
		v.fail("output_gate_type %q is not supported; it must be \"sigmoid\" or \"silu\"", q.OutputGateType)
	case q.HCCount < 2:
		v.fail("hc_count %d must be greater than 1", q.HCCount)
	case q.HCCount*g.HiddenSize > maxConfigDim:
		v.fail("hc_count %d × hidden_size %d exceeds %d", q.HCCount, g.HiddenSize, maxConfigDim)
	case q.NGramSize < 2:
		v.fail("ngram_size %d must be at least 2 (orders 2…ngram_size)", q.NGramSize)
	case q.IndexerKVHeads != 1:
		v.fail("indexer_kv_heads %d must be 1", q.IndexerKVHeads)
	case q.IndexerBudget%q.IndexerCompressRatio != 0:
		v.fail("indexer_budget %d is not a multiple of indexer_compress_ratio %d", q.IndexerBudget, q.IndexerCompressRatio)
	case rd > q.IndexerHeadDim:
		v.fail("indexer_head_dim %d is smaller than the rotary dim %d (head_dim × partial_rotary_factor)", q.IndexerHeadDim, rd)
	case q.PLEEmbedDim%nh != 0:
		v.fail("ple_embed_dim %d is not a multiple of (ngram_size − 1) × heads_per_ngram = %d", q.PLEEmbedDim, nh)
	}
}

// pleLayers turns the one-based ple_layer_ids into sorted zero-based layers.
func (tc *qwen4TextConfig) pleLayers(g *packexperts.Geometry, v *validator) []int {
	ids := slices.Clone(tc.PLELayerIDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	layers := []int{}
	for _, id := range ids {
		if id < 1 || id > g.NumLayers {
			v.fail("ple_layer_ids holds %d; ids are one-based layers in [1, %d]", id, g.NumLayers)
			return nil
		}
		if g.LayerTypes[id-1] != LinearAttention {
			v.fail("ple_layer_ids holds %d, but layer %d is %s; PLE sits on linear_attention layers", id, id-1, g.LayerTypes[id-1])
			return nil
		}
		layers = append(layers, id-1)
	}
	return layers
}

// resetToken reads eos_token_id (an id or a list; its first id resets the
// n-gram context). It is required only when there is a PLE layer.
func (tc *qwen4TextConfig) resetToken(g *packexperts.Geometry, needed bool, v *validator) int {
	raw := bytes.TrimSpace(tc.EOSTokenID)
	if len(raw) == 0 || string(raw) == "null" {
		if needed {
			v.fail("eos_token_id is missing; the PLE layer resets its n-gram context at it")
		}
		return 0
	}
	var id int
	if err := json.Unmarshal(raw, &id); err != nil {
		var ids []int
		if err := json.Unmarshal(raw, &ids); err != nil || len(ids) == 0 {
			v.fail("eos_token_id must be a token id or a non-empty list of ids")
			return 0
		}
		id = ids[0]
	}
	if id < 0 || id >= g.VocabSize {
		v.fail("eos_token_id %d is outside the vocabulary (vocab_size %d)", id, g.VocabSize)
	}
	return id
}

func sizeOr(v *validator, field string, p *int, def, limit int) int {
	if p == nil {
		return def
	}
	if *p <= 0 || *p > limit {
		v.fail("%s is %d; it must be between 1 and %d", field, *p, limit)
		return def
	}
	return *p
}

func int64Or(v *validator, field string, p *int64, def, lo, hi int64) int64 {
	if p == nil {
		return def
	}
	if *p < lo || *p > hi {
		v.fail("%s is %d; it must be between %d and %d", field, *p, lo, hi)
		return def
	}
	return *p
}

// Tensor names of qwen4_exp beyond qwen3_5_moe's (q38 §2.2–§2.4).
var (
	q4Globals = []string{
		"embed_tokens.weight", "hyper_connection_mixer.hc_norm.weight",
		"hyper_connection_mixer.input_mix_weight_down.weight", "hyper_connection_mixer.input_mix_weight_up.weight",
	}
	q4HyperConnections = []string{"attn_hyper_connection.", "mlp_hyper_connection."}
	q4HCTensors        = []string{"hc_norm.weight", "input_mix_weight_down.weight", "input_mix_weight_up.weight", "block_inject_weight.weight"}
	q4Indexer          = []string{"self_attn.indexer.index_qk_proj.weight", "self_attn.indexer.q_layernorm.weight", "self_attn.indexer.k_layernorm.weight"}
	q4PLE              = []string{"ple.key_proj.weight", "ple.value_proj.weight", "ple.norm_key.weight", "ple.norm_query.weight", "ple.norm_conv.weight", "ple.conv1d.weight"}
)

// N-gram table and buffer names inside a PLE layer.
const (
	ngramPrefix      = "ple.ple_embedding."
	ngramTablePrefix = ngramPrefix + "ngram_embedding."
	BufMultipliers   = "layer_multipliers"
	BufVocabSizes    = "ngram_heads_vocab_sizes"
	BufOffsets       = "ngram_heads_offsets"
)

// q4LayerTensorList is every resident tensor a qwen4_exp layer must have.
func q4LayerTensorList(g *packexperts.Geometry, layer int) []string {
	var names []string
	for _, x := range q4HyperConnections {
		for _, t := range q4HCTensors {
			names = append(names, x+t)
		}
	}
	if g.LayerTypes[layer] == FullAttention {
		names = append(append(names, fullAttn...), q4Indexer...)
	} else {
		names = append(names, linearAttn...)
	}
	names = append(names, moeMLP...)
	if slices.Contains(g.Qwen4Exp.PLELayers, layer) {
		names = append(names, q4PLE...)
	}
	return names
}

// Qwen4ExpResidentNames lists every resident tensor of a qwen4_exp geometry
// by canonical name: globals, then each layer's.
func Qwen4ExpResidentNames(g *packexperts.Geometry) []string {
	var names []string
	for _, n := range q4Globals {
		names = append(names, canonicalRoot+n)
	}
	if !g.TieWordEmbeddings {
		names = append(names, lmHead)
	}
	for l := range g.NumLayers {
		for _, n := range q4LayerTensorList(g, l) {
			names = append(names, fmt.Sprintf("model.layers.%d.%s", l, n))
		}
	}
	return names
}

// classifyQwen4 is Classify for qwen4_exp.
func classifyQwen4(name string, g *packexperts.Geometry) (Class, error) {
	c, rest, settled, err := classifyOuter(name, ArchQwen4Exp)
	if settled {
		return c, err
	}
	if slices.Contains(q4Globals, rest) {
		return c, nil
	}
	num, suffix, ok := strings.Cut(strings.TrimPrefix(rest, "layers."), ".")
	layer, ok2 := parseIndex(num)
	if !strings.HasPrefix(rest, "layers.") || !ok || !ok2 {
		return c, unknown(name, ArchQwen4Exp)
	}
	if layer >= g.NumLayers {
		return c, fmt.Errorf("tensor %q: layer %d, but num_hidden_layers is %d", name, layer, g.NumLayers)
	}
	c.Layer = layer
	if done, err := classifyExpert(&c, name, suffix, g.NumExperts, ArchQwen4Exp); done {
		return c, err
	}
	if strings.HasPrefix(suffix, ngramPrefix) && slices.Contains(g.Qwen4Exp.PLELayers, layer) {
		return c, classifyNGram(&c, name, suffix)
	}
	if !slices.Contains(q4LayerTensorList(g, layer), suffix) {
		return c, unknown(name, ArchQwen4Exp)
	}
	return c, nil
}

// classifyNGram recognises the table (unsharded or one shard) and the three
// I64 buffers of a PLE layer.
func classifyNGram(c *Class, name, suffix string) error {
	rest := strings.TrimPrefix(suffix, ngramPrefix)
	switch rest {
	case BufMultipliers, BufVocabSizes, BufOffsets:
		c.Role, c.Proj = NGramBuffer, rest
		return nil
	case "ngram_embedding.weight":
		c.Role, c.NGramShard = NGramTable, -1
		return nil
	}
	idx, ok := strings.CutPrefix(rest, "ngram_embedding.shard_")
	idx, ok2 := strings.CutSuffix(idx, ".weight")
	s, ok3 := parseIndex(idx)
	if !ok || !ok2 || !ok3 {
		return unknown(name, ArchQwen4Exp)
	}
	if s >= maxNGramShardIdx {
		return fmt.Errorf("tensor %q: n-gram shard %d is past the ceiling of %d shards", name, s, maxNGramShardIdx)
	}
	c.Role, c.NGramShard = NGramTable, s
	return nil
}

// qwen4Shape gives the shapes of the tensors qwen4_exp adds; ok is false for
// the ones it shares with qwen3_5_moe.
func qwen4Shape(c Class, g *packexperts.Geometry) (shape []int64, ok bool) {
	q := g.Qwen4Exp
	H, S, r := int64(g.HiddenSize), int64(q.HCCount), int64(q.HCLowRank)
	SH := S * H
	suffix := strings.TrimPrefix(c.Canonical, "model.")
	if c.Layer >= 0 {
		_, suffix, _ = strings.Cut(strings.TrimPrefix(suffix, "layers."), ".")
		for _, x := range q4HyperConnections {
			if t, found := strings.CutPrefix(suffix, x); found {
				suffix = "hyper_connection_mixer." + t
			}
		}
	}
	dih := int64(q.IndexerHeadDim)
	shapes := map[string][]int64{
		"hyper_connection_mixer.hc_norm.weight":               {SH},
		"hyper_connection_mixer.input_mix_weight_down.weight": {r, SH},
		"hyper_connection_mixer.input_mix_weight_up.weight":   {SH, r},
		"hyper_connection_mixer.block_inject_weight.weight":   {S, SH},
		"self_attn.indexer.index_qk_proj.weight":              {int64(q.IndexerNHeads+q.IndexerKVHeads) * dih, H},
		"self_attn.indexer.q_layernorm.weight":                {dih},
		"self_attn.indexer.k_layernorm.weight":                {dih},
		"ple.key_proj.weight":                                 {SH, int64(q.PLEEmbedDim)},
		"ple.value_proj.weight":                               {H, int64(q.PLEEmbedDim)},
		"ple.norm_key.weight":                                 {SH},
		"ple.norm_query.weight":                               {SH},
		"ple.norm_conv.weight":                                {SH},
		"ple.conv1d.weight":                                   {SH, 1, int64(q.PLEConvKernelSize)},
	}
	shape, ok = shapes[suffix]
	return shape, ok
}

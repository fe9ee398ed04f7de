package convert

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

// SynthGeometry is a model shape that `nvmai-convert synth` can fill with
// random weights. Source says where the numbers come from (docs/synthetic.md
// lists them with the same sources).
type SynthGeometry struct {
	Name         string
	Architecture string // packexperts.ArchQwen35MoE or packexperts.ArchQwen35
	Geometry     packexperts.Geometry
	Source       string
}

// fullAttentionInterval is Qwen3.5's layer pattern: three Gated DeltaNet
// layers, then one full-attention layer.
const fullAttentionInterval = 4

// qwen35Text holds the fields every released Qwen3.5 text decoder shares
// (rope, norms, GDN head sizes, vocabulary), so each geometry below only
// states what differs.
func qwen35Text(g packexperts.Geometry) packexperts.Geometry {
	g.VocabSize = 248320
	g.RMSNormEps = 1e-6
	g.HiddenAct = "silu"
	g.HeadDim = 256
	g.RopeTheta = 1e7
	g.PartialRotaryFactor = 0.25
	g.MaxPositionEmbeddings = 262144
	g.LinearConvKernelDim = 4
	g.LinearNumKeyHeads = 16
	g.LinearKeyHeadDim = 128
	g.LinearValueHeadDim = 128
	return g
}

// tinyText is the shape of the transformers fixtures in shared/fixtures/dev
// (tiny-moe-*, tiny-dense): small enough for tests to run a forward pass.
func tinyText(g packexperts.Geometry) packexperts.Geometry {
	g.VocabSize = 4160
	g.HiddenSize = 128
	g.RMSNormEps = 1e-6
	g.HiddenAct = "silu"
	g.NumAttentionHeads = 4
	g.NumKeyValueHeads = 2
	g.HeadDim = 32
	g.RopeTheta = 1e7
	g.PartialRotaryFactor = 0.25
	g.MaxPositionEmbeddings = 4096
	g.LinearConvKernelDim = 4
	g.LinearNumKeyHeads = 2
	g.LinearNumValueHeads = 4
	g.LinearKeyHeadDim = 32
	g.LinearValueHeadDim = 32
	return g
}

var synthGeometries = []SynthGeometry{
	{
		Name: "qwen3.5-35b-a3b", Architecture: packexperts.ArchQwen35MoE,
		Source: "Qwen/Qwen3.5-35B-A3B config.json as given in docs/qwen35-architecture.md §1.2",
		Geometry: qwen35Text(packexperts.Geometry{
			HiddenSize: 2048, NumLayers: 40, NumAttentionHeads: 16, NumKeyValueHeads: 2, LinearNumValueHeads: 32,
			NumExperts: 256, NumExpertsPerTok: 8, MoeIntermediateSize: 512, SharedExpertIntermediateSize: 512,
		}),
	},
	{
		Name: "qwen3.5-2b", Architecture: packexperts.ArchQwen35,
		Source: "Qwen/Qwen3.5-2B config.json as quoted by public code (see docs/synthetic.md)",
		Geometry: qwen35Text(packexperts.Geometry{
			HiddenSize: 2048, NumLayers: 24, NumAttentionHeads: 8, NumKeyValueHeads: 2, LinearNumValueHeads: 16,
			IntermediateSize: 6144, TieWordEmbeddings: true,
		}),
	},
	{
		Name: "qwen3.5-4b", Architecture: packexperts.ArchQwen35,
		Source: "Qwen/Qwen3.5-4B config.json as quoted by public code (see docs/synthetic.md)",
		Geometry: qwen35Text(packexperts.Geometry{
			HiddenSize: 2560, NumLayers: 32, NumAttentionHeads: 16, NumKeyValueHeads: 4, LinearNumValueHeads: 32,
			IntermediateSize: 9216, TieWordEmbeddings: true,
		}),
	},
	{
		Name: "qwen3.5-9b", Architecture: packexperts.ArchQwen35,
		Source: "Qwen/Qwen3.5-9B config.json as quoted by public code (see docs/synthetic.md)",
		Geometry: qwen35Text(packexperts.Geometry{
			HiddenSize: 4096, NumLayers: 32, NumAttentionHeads: 16, NumKeyValueHeads: 4, LinearNumValueHeads: 32,
			IntermediateSize: 12288,
		}),
	},
	{
		Name: "tiny-moe", Architecture: packexperts.ArchQwen35MoE,
		Source: "the tiny-moe transformers fixture (shared/fixtures/dev/tiny-moe-fused/config.json)",
		Geometry: tinyText(packexperts.Geometry{
			NumLayers: 8, NumExperts: 16, NumExpertsPerTok: 4, MoeIntermediateSize: 64, SharedExpertIntermediateSize: 64,
		}),
	},
	{
		Name: "tiny-dense", Architecture: packexperts.ArchQwen35,
		Source: "the tiny-dense transformers fixture (shared/fixtures/dev/tiny-dense/config.json)",
		Geometry: tinyText(packexperts.Geometry{
			NumLayers: 4, IntermediateSize: 256, TieWordEmbeddings: true,
		}),
	},
}

// qwen38Flash is Qwen3.8-Flash-Next 125B-A6B's text_config as
// ../shared/docs/qwen38-architecture.md §1.2 gives it (release column);
// docs/synthetic.md cites each number. The PLE reset id is the embedded
// tokenizer's <|endoftext|> (the release's is 248044): a synthetic install
// carries the tiny tokenizer, and the reset must be a token it can emit.
func qwen38Flash() SynthGeometry {
	return SynthGeometry{
		Name: "qwen3.8-flash-next-125b-a6b", Architecture: packexperts.ArchQwen4Exp,
		Source: "Qwen3.8-Flash-Next text_config, release column of shared/docs/qwen38-architecture.md §1.2 (n-gram table §2.6, sizes §6)",
		Geometry: qwen35Text(packexperts.Geometry{
			HiddenSize: 2560, NumLayers: 48, NumAttentionHeads: 24, NumKeyValueHeads: 2, LinearNumValueHeads: 48,
			NumExperts: 512, NumExpertsPerTok: 10, MoeIntermediateSize: 640, SharedExpertIntermediateSize: 640,
			Qwen4Exp: &packexperts.Qwen4ExpGeometry{
				HCCount: 4, HCLowRank: 320, OutputGateType: "sigmoid", NormTopKProb: true, PLELayers: []int{1},
				PLEEmbedDim: 2560, PLEConvKernelSize: 4, NGramSize: 3, HeadsPerNGram: 8, NGramVocabSizeBase: 20_000_000,
				NGramVocabSizeDivisibleBy: 128, Seed: 1234, SplitNGramParts: 128, PLEResetTokenID: synthEndOfText,
				IndexerNHeads: 4, IndexerKVHeads: 1, IndexerHeadDim: 128, IndexerBudget: 2048, IndexerCompressRatio: 4,
			},
		}),
	}
}

// tinyQwen38 is the shape of the tiny-qwen38-* transformers fixtures.
func tinyQwen38() SynthGeometry {
	g := tinyText(packexperts.Geometry{
		NumLayers: 8, NumExperts: 16, NumExpertsPerTok: 4, MoeIntermediateSize: 32, SharedExpertIntermediateSize: 32,
		Qwen4Exp: &packexperts.Qwen4ExpGeometry{
			HCCount: 4, HCLowRank: 16, OutputGateType: "sigmoid", NormTopKProb: true, PLELayers: []int{1},
			PLEEmbedDim: 64, PLEConvKernelSize: 4, NGramSize: 3, HeadsPerNGram: 8, NGramVocabSizeBase: 1000,
			NGramVocabSizeDivisibleBy: 128, Seed: 1234, SplitNGramParts: 4, PLEResetTokenID: synthEndOfText,
			IndexerNHeads: 8, IndexerKVHeads: 1, IndexerHeadDim: 16, IndexerBudget: 8, IndexerCompressRatio: 4,
		},
	})
	g.HiddenSize, g.LinearNumValueHeads, g.LinearKeyHeadDim, g.LinearValueHeadDim = 64, 6, 16, 16
	return SynthGeometry{
		Name: "tiny-qwen38", Architecture: packexperts.ArchQwen4Exp,
		Source: "the tiny-qwen38 transformers fixture (shared/fixtures/dev/tiny-qwen38-fused/config.json)", Geometry: g,
	}
}

func init() { synthGeometries = append(synthGeometries, qwen38Flash(), tinyQwen38()) }

// layerPattern is Qwen3.5's default layer_types: layer i is full attention
// when (i+1) is a multiple of the interval, as transformers derives it.
func layerPattern(n int) []string {
	types := make([]string, n)
	for i := range types {
		types[i] = "linear_attention"
		if (i+1)%fullAttentionInterval == 0 {
			types[i] = "full_attention"
		}
	}
	return types
}

// SynthGeometryNames lists the geometries synth knows, sorted.
func SynthGeometryNames() []string {
	names := make([]string, len(synthGeometries))
	for i, g := range synthGeometries {
		names[i] = g.Name
	}
	sort.Strings(names)
	return names
}

// LookupSynthGeometry returns the named geometry cut to its first layers
// decoder layers (0 keeps them all); the layer pattern is kept, so
// --layers 4 of a Qwen3.5 geometry has three GDN layers and one
// full-attention layer.
func LookupSynthGeometry(name string, layers int) (SynthGeometry, error) {
	for _, sg := range synthGeometries {
		if sg.Name != name {
			continue
		}
		full := sg.Geometry.NumLayers
		if layers < 0 || layers > full {
			return SynthGeometry{}, fmt.Errorf("--layers %d: %s has %d layers; choose 1 to %d (or leave it out for all)", layers, name, full, full)
		}
		if layers > 0 {
			sg.Geometry.NumLayers = layers
		}
		sg.Geometry.LayerTypes = layerPattern(sg.Geometry.NumLayers)
		if q := sg.Geometry.Qwen4Exp; q != nil {
			// A copy, so cutting layers never edits the table; PLE layers
			// past the cut go with their layers.
			cut := *q
			cut.PLELayers = []int{}
			for _, l := range q.PLELayers {
				if l < sg.Geometry.NumLayers {
					cut.PLELayers = append(cut.PLELayers, l)
				}
			}
			sg.Geometry.Qwen4Exp = &cut
		}
		return sg, nil
	}
	return SynthGeometry{}, fmt.Errorf("--geometry %q is not known; choose one of %s", name, strings.Join(SynthGeometryNames(), ", "))
}

// Token ids of the embedded tokenizer (synthassets/, the fixtures' tiny
// Qwen tokenizer): the specials follow its 4096 byte-level entries.
const (
	synthEndOfText = 4096 // <|endoftext|>: pad
	synthIMEnd     = 4098 // <|im_end|>: end of turn
)

type synthRope struct {
	RopeType            string  `json:"rope_type"`
	RopeTheta           float64 `json:"rope_theta"`
	PartialRotaryFactor float64 `json:"partial_rotary_factor"`
	MropeSection        []int   `json:"mrope_section"`
	MropeInterleaved    bool    `json:"mrope_interleaved"`
}

// synthTextConfig is text_config as transformers writes it for Qwen3.5.
type synthTextConfig struct {
	ModelType                    string    `json:"model_type"`
	VocabSize                    int       `json:"vocab_size"`
	HiddenSize                   int       `json:"hidden_size"`
	NumHiddenLayers              int       `json:"num_hidden_layers"`
	LayerTypes                   []string  `json:"layer_types"`
	FullAttentionInterval        int       `json:"full_attention_interval"`
	RMSNormEps                   float64   `json:"rms_norm_eps"`
	HiddenAct                    string    `json:"hidden_act"`
	NumAttentionHeads            int       `json:"num_attention_heads"`
	NumKeyValueHeads             int       `json:"num_key_value_heads"`
	HeadDim                      int       `json:"head_dim"`
	AttentionBias                bool      `json:"attention_bias"`
	AttnOutputGate               bool      `json:"attn_output_gate"`
	RopeParameters               synthRope `json:"rope_parameters"`
	MaxPositionEmbeddings        int       `json:"max_position_embeddings"`
	LinearConvKernelDim          int       `json:"linear_conv_kernel_dim"`
	LinearNumKeyHeads            int       `json:"linear_num_key_heads"`
	LinearNumValueHeads          int       `json:"linear_num_value_heads"`
	LinearKeyHeadDim             int       `json:"linear_key_head_dim"`
	LinearValueHeadDim           int       `json:"linear_value_head_dim"`
	IntermediateSize             int       `json:"intermediate_size,omitempty"`
	NumExperts                   int       `json:"num_experts,omitempty"`
	NumExpertsPerTok             int       `json:"num_experts_per_tok,omitempty"`
	MoeIntermediateSize          int       `json:"moe_intermediate_size,omitempty"`
	SharedExpertIntermediateSize int       `json:"shared_expert_intermediate_size,omitempty"`
	TieWordEmbeddings            bool      `json:"tie_word_embeddings"`
	MambaSSMDType                string    `json:"mamba_ssm_dtype"`
	EOSTokenID                   int       `json:"eos_token_id"`
	PadTokenID                   int       `json:"pad_token_id"`
	DType                        string    `json:"dtype"`
}

// synthMarker tells a reader of config.json that the weights are random.
type synthMarker struct {
	Generator int    `json:"generator"`
	Geometry  string `json:"geometry"`
	Seed      uint64 `json:"seed"`
	Sparse    bool   `json:"sparse,omitempty"`
	Note      string `json:"note"`
}

type synthConfig struct {
	Architectures     []string        `json:"architectures"`
	ModelType         string          `json:"model_type"`
	TextConfig        synthTextConfig `json:"text_config"`
	TieWordEmbeddings bool            `json:"tie_word_embeddings"`
	DType             string          `json:"dtype"`
	Synthetic         synthMarker     `json:"nvmai_synthetic"`
}

// mropeSection splits the rotary half-dimension over (temporal, height,
// width) as the released configs do: [11, 11, 10] for 32, [2, 1, 1] for 4.
func mropeSection(g *packexperts.Geometry) []int {
	half := int(float64(g.HeadDim)*g.PartialRotaryFactor) / 2
	s := []int{half / 3, half / 3, half / 3}
	for i := 0; i < half%3; i++ {
		s[i]++
	}
	return s
}

// synthQwen4Config is text_config for qwen4_exp: the qwen3_5 fields plus
// hyper-connections, PLE and the indexer, as 5.17 writes them.
type synthQwen4Config struct {
	synthTextConfig
	OutputGateType       string `json:"output_gate_type"`
	NormTopKProb         bool   `json:"norm_topk_prob"`
	HCCount              int    `json:"hc_count"`
	HCLowRank            int    `json:"hc_lowrank"`
	PLELayerIDs          []int  `json:"ple_layer_ids"`
	PLEEmbedDim          int    `json:"ple_embed_dim"`
	PLEConvKernelSize    int    `json:"ple_conv_kernel_size"`
	NGramSize            int    `json:"ngram_size"`
	HeadsPerNGram        int    `json:"heads_per_ngram"`
	NGramVocabSizeBase   int64  `json:"ngram_vocab_size_base"`
	DivisibleBy          int64  `json:"make_ngram_vocab_size_divisible_by"`
	Seed                 int64  `json:"seed"`
	SplitNGramParts      int    `json:"split_ngram_parts"`
	IndexerNHeads        int    `json:"indexer_n_heads"`
	IndexerKVHeads       int    `json:"indexer_kv_heads"`
	IndexerHeadDim       int    `json:"indexer_head_dim"`
	IndexerBudget        int    `json:"indexer_budget"`
	IndexerCompressRatio int    `json:"indexer_compress_ratio"`
}

func qwen4TextConfig(tc synthTextConfig, q *packexperts.Qwen4ExpGeometry) synthQwen4Config {
	tc.EOSTokenID = q.PLEResetTokenID // text_config's eos is the PLE reset token, not the stop list
	ids := make([]int, len(q.PLELayers))
	for i, l := range q.PLELayers {
		ids[i] = l + 1
	}
	return synthQwen4Config{
		synthTextConfig: tc, OutputGateType: q.OutputGateType, NormTopKProb: q.NormTopKProb, HCCount: q.HCCount,
		HCLowRank: q.HCLowRank, PLELayerIDs: ids, PLEEmbedDim: q.PLEEmbedDim, PLEConvKernelSize: q.PLEConvKernelSize,
		NGramSize: q.NGramSize, HeadsPerNGram: q.HeadsPerNGram, NGramVocabSizeBase: q.NGramVocabSizeBase,
		DivisibleBy: q.NGramVocabSizeDivisibleBy, Seed: q.Seed, SplitNGramParts: q.SplitNGramParts,
		IndexerNHeads: q.IndexerNHeads, IndexerKVHeads: q.IndexerKVHeads, IndexerHeadDim: q.IndexerHeadDim,
		IndexerBudget: q.IndexerBudget, IndexerCompressRatio: q.IndexerCompressRatio,
	}
}

// configJSON is the config.json of a synthetic install: the released
// vision-language layout (text_config nested) without a vision_config,
// since a synthetic install has no vision tower.
func (sg *SynthGeometry) configJSON(seed uint64, sparse bool) ([]byte, error) {
	g := &sg.Geometry
	arch := "Qwen3_5ForConditionalGeneration"
	switch sg.Architecture {
	case packexperts.ArchQwen35MoE:
		arch = "Qwen3_5MoeForConditionalGeneration"
	case packexperts.ArchQwen4Exp:
		arch = "Qwen4ExpForConditionalGeneration"
	}
	cfg := synthConfig{
		Architectures: []string{arch}, ModelType: sg.Architecture, TieWordEmbeddings: g.TieWordEmbeddings, DType: "bfloat16",
		TextConfig: synthTextConfig{
			ModelType: sg.Architecture + "_text", VocabSize: g.VocabSize, HiddenSize: g.HiddenSize,
			NumHiddenLayers: g.NumLayers, LayerTypes: g.LayerTypes, FullAttentionInterval: fullAttentionInterval,
			RMSNormEps: g.RMSNormEps, HiddenAct: g.HiddenAct, NumAttentionHeads: g.NumAttentionHeads,
			NumKeyValueHeads: g.NumKeyValueHeads, HeadDim: g.HeadDim, AttnOutputGate: true,
			RopeParameters: synthRope{RopeType: "default", RopeTheta: g.RopeTheta, PartialRotaryFactor: g.PartialRotaryFactor,
				MropeSection: mropeSection(g), MropeInterleaved: true},
			MaxPositionEmbeddings: g.MaxPositionEmbeddings, LinearConvKernelDim: g.LinearConvKernelDim,
			LinearNumKeyHeads: g.LinearNumKeyHeads, LinearNumValueHeads: g.LinearNumValueHeads,
			LinearKeyHeadDim: g.LinearKeyHeadDim, LinearValueHeadDim: g.LinearValueHeadDim,
			IntermediateSize: g.IntermediateSize, NumExperts: g.NumExperts, NumExpertsPerTok: g.NumExpertsPerTok,
			MoeIntermediateSize: g.MoeIntermediateSize, SharedExpertIntermediateSize: g.SharedExpertIntermediateSize,
			TieWordEmbeddings: g.TieWordEmbeddings, MambaSSMDType: "float32",
			EOSTokenID: synthIMEnd, PadTokenID: synthEndOfText, DType: "bfloat16",
		},
		Synthetic: synthMarker{Generator: synthGenerator, Geometry: sg.Name, Seed: seed,
			Note: "random weights written by nvmai-convert synth for measurement; the model says nothing meaningful"},
	}
	if sparse {
		cfg.Synthetic.Sparse = true
		cfg.Synthetic.Note = "random weights written by nvmai-convert synth --sparse: the routed experts' codes are file holes (zeros), " +
			"for speed and memory measurements of installs bigger than the disk, not for fidelity"
	}
	if g.Qwen4Exp != nil {
		return indentJSON(struct {
			synthConfig
			TextConfig synthQwen4Config `json:"text_config"`
		}{cfg, qwen4TextConfig(cfg.TextConfig, g.Qwen4Exp)})
	}
	return indentJSON(cfg)
}

// generationConfigJSON uses the fixtures' sampling settings and the
// embedded tokenizer's end-of-turn and end-of-text ids.
func generationConfigJSON() ([]byte, error) {
	return indentJSON(struct {
		DoSample    bool    `json:"do_sample"`
		Temperature float64 `json:"temperature"`
		TopP        float64 `json:"top_p"`
		TopK        int     `json:"top_k"`
		EOSTokenID  []int   `json:"eos_token_id"`
		PadTokenID  int     `json:"pad_token_id"`
	}{true, 0.7, 0.95, 20, []int{synthIMEnd, synthEndOfText}, synthEndOfText})
}

func indentJSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// SynthConfigFiles returns the config.json and generation_config.json a
// synthetic geometry is described by (seed 0), for tools that write a
// Hugging Face-format snapshot of it.
func SynthConfigFiles(sg SynthGeometry) (config, generation []byte, err error) {
	if config, err = sg.configJSON(0, false); err != nil {
		return nil, nil, err
	}
	generation, err = generationConfigJSON()
	return config, generation, err
}

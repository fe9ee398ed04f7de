package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Architectures nvmai runs, as written in install manifests.
const (
	ArchMoE   = "qwen3_5_moe"
	ArchDense = "qwen3_5"
)

// Layer types of Geometry.LayerTypes.
const (
	LinearAttention = "linear_attention"
	FullAttention   = "full_attention"
)

// modelTypes maps every config.json model_type we accept to its architecture
// and whether the text fields sit under text_config (the released
// vision-language form) or at the top level (the text-only form).
var modelTypes = map[string]struct {
	arch   string
	nested bool
}{
	"qwen3_5_moe":      {ArchMoE, true},
	"qwen3_5":          {ArchDense, true},
	"qwen3_5_moe_text": {ArchMoE, false},
	"qwen3_5_text":     {ArchDense, false},
}

// maxConfigDim bounds every size in config.json. The largest real value is a
// 248k vocabulary; 2^24 leaves ample room while keeping every product of two
// sizes (the largest a tensor shape needs) far from int64 overflow.
const maxConfigDim = 1 << 24

// Defaults of docs/qwen35-architecture.md §1.2 and of transformers'
// Qwen3_5(Moe)TextConfig for fields that do not change tensor shapes.
const (
	defaultPartialRotaryFactor   = 0.25
	defaultFullAttentionInterval = 4
	defaultRMSNormEps            = 1e-6
	defaultHiddenAct             = "silu"
	defaultRopeType              = "default"
)

type topConfig struct {
	ModelType         string          `json:"model_type"`
	TextConfig        json.RawMessage `json:"text_config"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
}

type ropeParameters struct {
	RopeType            *string  `json:"rope_type"`
	LegacyType          *string  `json:"type"` // transformers 4 spelling inside rope_scaling
	RopeTheta           *float64 `json:"rope_theta"`
	PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
}

// textConfig holds the text_config fields; pointers distinguish absent from zero.
type textConfig struct {
	ModelType                    string          `json:"model_type"`
	VocabSize                    *int            `json:"vocab_size"`
	HiddenSize                   *int            `json:"hidden_size"`
	NumHiddenLayers              *int            `json:"num_hidden_layers"`
	LayerTypes                   []string        `json:"layer_types"`
	FullAttentionInterval        *int            `json:"full_attention_interval"`
	RMSNormEps                   *float64        `json:"rms_norm_eps"`
	HiddenAct                    *string         `json:"hidden_act"`
	NumAttentionHeads            *int            `json:"num_attention_heads"`
	NumKeyValueHeads             *int            `json:"num_key_value_heads"`
	HeadDim                      *int            `json:"head_dim"`
	AttentionBias                *bool           `json:"attention_bias"`
	RopeParameters               *ropeParameters `json:"rope_parameters"`
	RopeScaling                  *ropeParameters `json:"rope_scaling"` // transformers 4 configs
	RopeTheta                    *float64        `json:"rope_theta"`   // transformers 4 configs
	PartialRotaryFactor          *float64        `json:"partial_rotary_factor"`
	MaxPositionEmbeddings        *int            `json:"max_position_embeddings"`
	LinearConvKernelDim          *int            `json:"linear_conv_kernel_dim"`
	LinearNumKeyHeads            *int            `json:"linear_num_key_heads"`
	LinearNumValueHeads          *int            `json:"linear_num_value_heads"`
	LinearKeyHeadDim             *int            `json:"linear_key_head_dim"`
	LinearValueHeadDim           *int            `json:"linear_value_head_dim"`
	IntermediateSize             *int            `json:"intermediate_size"`
	NumExperts                   *int            `json:"num_experts"`
	NumExpertsPerTok             *int            `json:"num_experts_per_tok"`
	MoeIntermediateSize          *int            `json:"moe_intermediate_size"`
	SharedExpertIntermediateSize *int            `json:"shared_expert_intermediate_size"`
	TieWordEmbeddings            *bool           `json:"tie_word_embeddings"`
}

// ParseConfig reads config.json content (name is used in errors) and returns
// the architecture ("qwen3_5_moe" or "qwen3_5") and the validated text
// geometry with the documented defaults applied.
func ParseConfig(data []byte, name string) (arch string, g packexperts.Geometry, err error) {
	var top topConfig
	if err := unmarshalObject(data, &top); err != nil {
		return "", g, fmt.Errorf("%s: %v", name, err)
	}
	if nested, ok := qwen4ModelTypes[top.ModelType]; ok {
		return parseQwen4Exp(data, top, nested, name)
	}
	mt, ok := modelTypes[top.ModelType]
	if !ok {
		return "", g, fmt.Errorf("%s: model_type %q is not supported; nvmai reads qwen3_5_moe, qwen3_5 and qwen4_exp (or their text-only forms qwen3_5_moe_text, qwen3_5_text and qwen4_exp_text)", name, top.ModelType)
	}
	text := data
	if mt.nested {
		if len(top.TextConfig) == 0 || string(top.TextConfig) == "null" {
			return "", g, fmt.Errorf("%s: model_type %q needs a text_config object, which is missing", name, top.ModelType)
		}
		text = top.TextConfig
	}
	var tc textConfig
	if err := unmarshalObject(text, &tc); err != nil {
		return "", g, fmt.Errorf("%s: text_config: %v", name, err)
	}
	if mt.nested && tc.ModelType != "" && tc.ModelType != top.ModelType+"_text" {
		return "", g, fmt.Errorf("%s: text_config.model_type %q does not match model_type %q (want %q)", name, tc.ModelType, top.ModelType, top.ModelType+"_text")
	}
	if mt.nested && top.TieWordEmbeddings != nil {
		if tc.TieWordEmbeddings != nil && *tc.TieWordEmbeddings != *top.TieWordEmbeddings {
			return "", g, fmt.Errorf("%s: tie_word_embeddings is %v at the top level but %v in text_config; fix the config so they agree", name, *top.TieWordEmbeddings, *tc.TieWordEmbeddings)
		}
		tc.TieWordEmbeddings = top.TieWordEmbeddings
	}
	g, err = tc.geometry(mt.arch)
	if err != nil {
		return "", g, fmt.Errorf("%s: %v", name, err)
	}
	return mt.arch, g, nil
}

// unmarshalObject decodes a JSON object, refusing anything else (a bare null
// would otherwise decode into an all-absent struct).
func unmarshalObject(data []byte, v any) error {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return fmt.Errorf("not a JSON object")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("invalid JSON: %v", err)
	}
	return nil
}

func (tc *textConfig) geometry(arch string) (packexperts.Geometry, error) {
	v := &validator{}
	g := packexperts.Geometry{
		VocabSize:             v.size("vocab_size", tc.VocabSize),
		HiddenSize:            v.size("hidden_size", tc.HiddenSize),
		NumLayers:             v.size("num_hidden_layers", tc.NumHiddenLayers),
		NumAttentionHeads:     v.size("num_attention_heads", tc.NumAttentionHeads),
		NumKeyValueHeads:      v.size("num_key_value_heads", tc.NumKeyValueHeads),
		HeadDim:               v.size("head_dim", tc.HeadDim),
		MaxPositionEmbeddings: v.size("max_position_embeddings", tc.MaxPositionEmbeddings),
		LinearConvKernelDim:   v.size("linear_conv_kernel_dim", tc.LinearConvKernelDim),
		LinearNumKeyHeads:     v.size("linear_num_key_heads", tc.LinearNumKeyHeads),
		LinearNumValueHeads:   v.size("linear_num_value_heads", tc.LinearNumValueHeads),
		LinearKeyHeadDim:      v.size("linear_key_head_dim", tc.LinearKeyHeadDim),
		LinearValueHeadDim:    v.size("linear_value_head_dim", tc.LinearValueHeadDim),
		RMSNormEps:            orDefault(tc.RMSNormEps, defaultRMSNormEps),
		HiddenAct:             orDefault(tc.HiddenAct, defaultHiddenAct),
		TieWordEmbeddings:     orDefault(tc.TieWordEmbeddings, false),
	}
	if arch == ArchMoE {
		g.NumExperts = v.size("num_experts", tc.NumExperts)
		g.NumExpertsPerTok = v.size("num_experts_per_tok", tc.NumExpertsPerTok)
		g.MoeIntermediateSize = v.size("moe_intermediate_size", tc.MoeIntermediateSize)
		g.SharedExpertIntermediateSize = v.size("shared_expert_intermediate_size", tc.SharedExpertIntermediateSize)
		if v.err == nil && g.NumExpertsPerTok > g.NumExperts {
			v.fail("num_experts_per_tok %d exceeds num_experts %d", g.NumExpertsPerTok, g.NumExperts)
		}
	} else {
		g.IntermediateSize = v.size("intermediate_size", tc.IntermediateSize)
	}
	if v.err != nil {
		return g, v.err
	}
	tc.rope(&g, v)
	g.LayerTypes = tc.layerTypes(g.NumLayers, v)
	checkGeometry(&g, v)
	if orDefault(tc.AttentionBias, false) {
		v.fail("attention_bias is true; Qwen3.5 has no attention biases and nvmai does not support them")
	}
	return g, v.err
}

func (tc *textConfig) rope(g *packexperts.Geometry, v *validator) {
	rp := tc.RopeParameters
	if rp == nil {
		rp = tc.RopeScaling // transformers 4 layout: theta at the top level
		if rp == nil {
			rp = &ropeParameters{}
		}
	}
	ropeType := defaultRopeType
	switch {
	case rp.RopeType != nil:
		ropeType = *rp.RopeType
	case rp.LegacyType != nil:
		ropeType = *rp.LegacyType
	}
	// transformers 4 wrote multimodal RoPE as type "mrope"; it loads as "default".
	if ropeType != defaultRopeType && ropeType != "mrope" {
		v.fail("rope_parameters.rope_type %q is not supported; only \"default\" is", ropeType)
	}
	theta := rp.RopeTheta
	if theta == nil {
		theta = tc.RopeTheta
	}
	if theta == nil || !(*theta > 0) || math.IsInf(*theta, 0) {
		v.fail("rope_parameters.rope_theta must be a positive number")
	} else {
		g.RopeTheta = *theta
	}
	// The value inside rope_parameters wins over the top-level one (§1.2).
	prf := defaultPartialRotaryFactor
	if rp.PartialRotaryFactor != nil {
		prf = *rp.PartialRotaryFactor
	} else if tc.PartialRotaryFactor != nil {
		prf = *tc.PartialRotaryFactor
	}
	g.PartialRotaryFactor = prf
	rd := int(float64(g.HeadDim) * prf)
	if !(prf > 0 && prf <= 1) || rd < 2 || rd%2 != 0 {
		v.fail("partial_rotary_factor %v with head_dim %d gives rotary dim %d; it must be in (0, 1] and give an even rotary dim", prf, g.HeadDim, rd)
	}
}

func (tc *textConfig) layerTypes(numLayers int, v *validator) []string {
	if tc.LayerTypes != nil {
		if len(tc.LayerTypes) != numLayers {
			v.fail("layer_types has %d entries but num_hidden_layers is %d", len(tc.LayerTypes), numLayers)
		}
		for i, t := range tc.LayerTypes {
			if t != LinearAttention && t != FullAttention {
				v.fail("layer_types[%d] is %q; only %q and %q are supported", i, t, LinearAttention, FullAttention)
			}
		}
		return append([]string(nil), tc.LayerTypes...)
	}
	interval := orDefault(tc.FullAttentionInterval, defaultFullAttentionInterval)
	if interval <= 0 || interval > maxConfigDim {
		v.fail("full_attention_interval %d must be positive", interval)
		return nil
	}
	types := make([]string, numLayers)
	for i := range types {
		types[i] = LinearAttention
		if (i+1)%interval == 0 {
			types[i] = FullAttention
		}
	}
	return types
}

func checkGeometry(g *packexperts.Geometry, v *validator) {
	if g.HiddenAct != defaultHiddenAct {
		v.fail("hidden_act %q is not supported; Qwen3.5 uses \"silu\"", g.HiddenAct)
	}
	if !(g.RMSNormEps > 0 && g.RMSNormEps < 1) {
		v.fail("rms_norm_eps %v must be in (0, 1)", g.RMSNormEps)
	}
	if g.LinearNumValueHeads%g.LinearNumKeyHeads != 0 {
		v.fail("linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", g.LinearNumValueHeads, g.LinearNumKeyHeads)
	}
	if g.NumAttentionHeads%g.NumKeyValueHeads != 0 {
		v.fail("num_attention_heads %d is not a multiple of num_key_value_heads %d", g.NumAttentionHeads, g.NumKeyValueHeads)
	}
}

// validator keeps the first configuration error so geometry can read every
// field in one pass and still report the earliest problem.
type validator struct{ err error }

func (v *validator) fail(format string, args ...any) {
	if v.err == nil {
		v.err = fmt.Errorf(format, args...)
	}
}

func (v *validator) size(field string, p *int) int {
	switch {
	case p == nil:
		v.fail("%s is missing", field)
		return 0
	case *p <= 0 || *p > maxConfigDim:
		v.fail("%s is %d; it must be between 1 and %d", field, *p, maxConfigDim)
		return 0
	}
	return *p
}

func orDefault[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

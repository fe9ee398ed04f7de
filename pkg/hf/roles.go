package hf

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Role says what a source tensor is for.
type Role int

const (
	Resident    Role = iota + 1 // text decoder weight kept in memory
	Expert                      // routed MoE expert weight, streamed from disk
	Visual                      // vision tower: skipped by the text runtime
	MTP                         // multi-token-prediction head: kept aside, not run
	NGramTable                  // qwen4_exp: (a shard of) a PLE layer's n-gram table
	NGramBuffer                 // qwen4_exp: an I64 hashing buffer of a PLE layer
)

func (r Role) String() string {
	switch r {
	case Resident:
		return "resident"
	case Expert:
		return "expert"
	case Visual:
		return "visual"
	case MTP:
		return "mtp"
	case NGramTable:
		return "ngram-table"
	case NGramBuffer:
		return "ngram-buffer"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// Expert projections. ProjGateUp is the fused layout's [E, 2I, H] tensor.
const (
	ProjGate   = "gate"
	ProjUp     = "up"
	ProjDown   = "down"
	ProjGateUp = "gate_up"
)

// Name prefixes: the vision-language checkpoints put the text decoder under
// model.language_model., text-only ones under model.; canonical names use the
// latter.
const (
	prefixVL      = "model.language_model."
	prefixText    = "model."
	prefixVisual  = "model.visual."
	prefixMTP     = "mtp."
	lmHead        = "lm_head.weight"
	canonicalRoot = "model."
)

// ErrUnknownTensor is wrapped by Classify's error for a name that is not a
// tensor of the architecture.
var ErrUnknownTensor = errors.New("not a known tensor name")

// Class is the role of one source tensor and where it belongs.
type Class struct {
	Role Role
	// Canonical is the name with the text prefix rewritten to "model."
	// (model.layers.3.self_attn.q_proj.weight, model.norm.weight,
	// lm_head.weight); for Visual and MTP it is the source name.
	Canonical  string
	Layer      int    // decoder layer, -1 for global tensors
	Expert     int    // expert index of the per-expert layout, -1 otherwise
	Proj       string // expert projection: ProjGate, ProjUp, ProjDown or ProjGateUp; the buffer name of an NGramBuffer
	Fused      bool   // expert tensor of the fused layout
	NGramShard int    // NGramTable: shard index, -1 for the unsharded table
}

// classifyOuter settles the names every architecture shares: MTP and
// visual tensors, lm_head, and a name under neither language-model prefix
// (unknown to arch). Any other name is settled false, with the rest of its
// name below the prefix and a resident Class under its canonical name.
func classifyOuter(name, arch string) (c Class, rest string, settled bool, err error) {
	c = Class{Canonical: name, Layer: -1, Expert: -1}
	switch {
	case strings.HasPrefix(name, prefixMTP):
		c.Role = MTP
		return c, "", true, nil
	case strings.HasPrefix(name, prefixVisual):
		c.Role = Visual
		return c, "", true, nil
	case name == lmHead:
		c.Role = Resident
		return c, "", true, nil
	}
	rest, ok := strings.CutPrefix(name, prefixVL)
	if !ok {
		if rest, ok = strings.CutPrefix(name, prefixText); !ok {
			return c, "", true, unknown(name, arch)
		}
	}
	c.Role, c.Canonical = Resident, canonicalRoot+rest
	return c, rest, false, nil
}

// Classify names the role of a source tensor of architecture arch ("qwen3_5_moe"
// or "qwen3_5") with geometry g. A name that is not one of the architecture's
// tensors (docs/qwen35-architecture.md §2) wraps ErrUnknownTensor; a layer or
// expert index past the geometry is a distinct error.
func Classify(name, arch string, g *packexperts.Geometry) (Class, error) {
	if arch == ArchQwen4Exp {
		return classifyQwen4(name, g)
	}
	c, rest, settled, err := classifyOuter(name, arch)
	if settled {
		return c, err
	}
	if rest == "embed_tokens.weight" || rest == "norm.weight" {
		return c, nil
	}
	layerPart, ok := strings.CutPrefix(rest, "layers.")
	if !ok {
		return c, unknown(name, arch)
	}
	num, suffix, ok := strings.Cut(layerPart, ".")
	layer, ok2 := parseIndex(num)
	if !ok || !ok2 {
		return c, unknown(name, arch)
	}
	if layer >= g.NumLayers || layer >= len(g.LayerTypes) {
		return c, fmt.Errorf("tensor %q: layer %d, but num_hidden_layers is %d", name, layer, g.NumLayers)
	}
	c.Layer = layer
	if arch == ArchMoE {
		if done, err := classifyExpert(&c, name, suffix, g.NumExperts, arch); done {
			return c, err
		}
	}
	if !layerTensors(arch, g.LayerTypes[layer])[suffix] {
		return c, unknown(name, arch)
	}
	return c, nil
}

// classifyExpert recognises the two expert layouts; done is false when suffix
// is not an expert tensor at all.
func classifyExpert(c *Class, name, suffix string, numExperts int, arch string) (done bool, err error) {
	rest, ok := strings.CutPrefix(suffix, "mlp.experts.")
	if !ok {
		return false, nil
	}
	c.Role = Expert
	switch rest {
	case "gate_up_proj":
		c.Proj, c.Fused = ProjGateUp, true
		return true, nil
	case "down_proj":
		c.Proj, c.Fused = ProjDown, true
		return true, nil
	}
	num, proj, _ := strings.Cut(rest, ".")
	e, ok := parseIndex(num)
	p, ok2 := strings.CutSuffix(proj, "_proj.weight")
	if !ok || !ok2 || (p != ProjGate && p != ProjUp && p != ProjDown) {
		c.Role = Resident
		return true, unknown(name, arch)
	}
	if e >= numExperts {
		return true, fmt.Errorf("tensor %q: expert %d, but num_experts is %d", name, e, numExperts)
	}
	c.Expert, c.Proj = e, p
	return true, nil
}

func unknown(name, arch string) error {
	return fmt.Errorf("tensor %q: %w of %s", name, ErrUnknownTensor, arch)
}

// parseIndex accepts a canonical decimal index: no sign, no leading zeros,
// since "03" would name the same layer under a second spelling.
func parseIndex(s string) (int, bool) {
	if s == "" || len(s) > 9 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// Per-layer resident tensors (the part after "layers.{i}."), §2.2.
var (
	normTensors = []string{"input_layernorm.weight", "post_attention_layernorm.weight"}
	linearAttn  = []string{
		"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight",
		"linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight",
		"linear_attn.conv1d.weight", "linear_attn.A_log", "linear_attn.dt_bias",
		"linear_attn.norm.weight", "linear_attn.out_proj.weight",
	}
	fullAttn = []string{
		"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
		"self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
	}
	denseMLP = []string{"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}
	moeMLP   = []string{
		"mlp.gate.weight", "mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight",
		"mlp.shared_expert.down_proj.weight", "mlp.shared_expert_gate.weight",
	}
)

// layerTensorList is every resident tensor a layer of this type must have.
func layerTensorList(arch, layerType string) []string {
	names := append([]string(nil), normTensors...)
	if layerType == FullAttention {
		names = append(names, fullAttn...)
	} else {
		names = append(names, linearAttn...)
	}
	if arch == ArchMoE {
		return append(names, moeMLP...)
	}
	return append(names, denseMLP...)
}

func layerTensors(arch, layerType string) map[string]bool {
	set := map[string]bool{}
	for _, n := range layerTensorList(arch, layerType) {
		set[n] = true
	}
	return set
}

// ExpectedShape is the shape §2 gives for a resident or expert tensor, or nil
// for Visual and MTP tensors, whose shapes nvmai does not depend on.
func (c Class) ExpectedShape(g *packexperts.Geometry) []int64 {
	d := func(v ...int) []int64 {
		s := make([]int64, len(v))
		for i, x := range v {
			s[i] = int64(x)
		}
		return s
	}
	H, E, I := g.HiddenSize, g.NumExperts, g.MoeIntermediateSize
	switch {
	case c.Role == Expert && c.Fused && c.Proj == ProjGateUp:
		return d(E, 2*I, H)
	case c.Role == Expert && c.Fused:
		return d(E, H, I)
	case c.Role == Expert && c.Proj == ProjDown:
		return d(H, I)
	case c.Role == Expert:
		return d(I, H)
	case c.Role != Resident:
		return nil
	}
	if g.Qwen4Exp != nil {
		if s, ok := qwen4Shape(c, g); ok {
			return s
		}
	}
	switch c.Canonical {
	case "model.embed_tokens.weight", lmHead:
		return d(g.VocabSize, H)
	case "model.norm.weight":
		return d(H)
	}
	_, suffix, _ := strings.Cut(strings.TrimPrefix(c.Canonical, "model.layers."), ".")
	kd, vd := g.LinearNumKeyHeads*g.LinearKeyHeadDim, g.LinearNumValueHeads*g.LinearValueHeadDim
	Hv, Dh := g.LinearNumValueHeads, g.HeadDim
	Is, Id := g.SharedExpertIntermediateSize, g.IntermediateSize
	shapes := map[string][]int64{
		"input_layernorm.weight":             d(H),
		"post_attention_layernorm.weight":    d(H),
		"linear_attn.in_proj_qkv.weight":     d(2*kd+vd, H),
		"linear_attn.in_proj_z.weight":       d(vd, H),
		"linear_attn.in_proj_b.weight":       d(Hv, H),
		"linear_attn.in_proj_a.weight":       d(Hv, H),
		"linear_attn.conv1d.weight":          d(2*kd+vd, 1, g.LinearConvKernelDim),
		"linear_attn.A_log":                  d(Hv),
		"linear_attn.dt_bias":                d(Hv),
		"linear_attn.norm.weight":            d(g.LinearValueHeadDim),
		"linear_attn.out_proj.weight":        d(H, vd),
		"self_attn.q_proj.weight":            d(g.NumAttentionHeads*2*Dh, H),
		"self_attn.k_proj.weight":            d(g.NumKeyValueHeads*Dh, H),
		"self_attn.v_proj.weight":            d(g.NumKeyValueHeads*Dh, H),
		"self_attn.o_proj.weight":            d(H, g.NumAttentionHeads*Dh),
		"self_attn.q_norm.weight":            d(Dh),
		"self_attn.k_norm.weight":            d(Dh),
		"mlp.gate_proj.weight":               d(Id, H),
		"mlp.up_proj.weight":                 d(Id, H),
		"mlp.down_proj.weight":               d(H, Id),
		"mlp.gate.weight":                    d(E, H),
		"mlp.shared_expert.gate_proj.weight": d(Is, H),
		"mlp.shared_expert.up_proj.weight":   d(Is, H),
		"mlp.shared_expert.down_proj.weight": d(H, Is),
		"mlp.shared_expert_gate.weight":      d(1, H),
	}
	return shapes[suffix]
}

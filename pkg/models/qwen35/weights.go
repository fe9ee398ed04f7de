package qwen35

import "github.com/nvmai/nvmai/pkg/models/blocks"

// Weights gives the resident tensors by canonical name (blocks.Weights):
// "model.embed_tokens.weight", "model.layers.3.self_attn.q_proj.weight",
// "model.norm.weight", "lm_head.weight"; only lm_head.weight is optional.
type Weights = blocks.Weights

// Canonical tensor names.
const (
	nameEmbed  = "model.embed_tokens.weight"
	nameNorm   = "model.norm.weight"
	nameLMHead = "lm_head.weight"
)

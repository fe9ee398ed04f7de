package qwen35

import (
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// Weights gives the resident tensors by canonical name (blocks.Weights):
// "model.embed_tokens.weight", "model.layers.3.self_attn.q_proj.weight",
// "model.norm.weight", "lm_head.weight"; only lm_head.weight is optional.
type Weights = blocks.Weights

// The expert contract lives in package moe, shared by every architecture.
type (
	Experts            = model.Experts
	AcquireLimiter     = model.AcquireLimiter
	ExpertVisitor      = model.ExpertVisitor
	ExpertGroupVisitor = model.ExpertGroupVisitor
	ExpertPrefetcher   = model.ExpertPrefetcher
	ExpertMats         = model.ExpertMats
)

// Canonical tensor names.
const (
	nameEmbed  = "model.embed_tokens.weight"
	nameNorm   = "model.norm.weight"
	nameLMHead = "lm_head.weight"
)

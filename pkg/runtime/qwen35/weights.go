package qwen35

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/runtime/blocks"
	"github.com/nvmai/nvmai/pkg/runtime/moe"
)

// Weights gives the resident tensors by canonical name: the Hugging Face
// name with its "model.language_model." prefix rewritten to "model."
// ("model.embed_tokens.weight", "model.layers.3.self_attn.q_proj.weight",
// "model.norm.weight", "lm_head.weight"). The model never learns whether
// they live in RAM, in an mmap'd file or anywhere else.
type Weights interface {
	// Matrix returns a linear weight [out, in] in any kernels encoding.
	Matrix(name string) (*kernels.Matrix, error)
	// Vector returns a 1-D parameter widened to float32 (norms, A_log,
	// dt_bias); conv1d.weight [C, 1, K] comes flattened to C·K values.
	Vector(name string) ([]float32, error)
	// Has reports whether name exists; only lm_head.weight is optional.
	Has(name string) bool
}

// The expert contract lives in package moe, shared by every architecture.
type (
	Experts            = moe.Experts
	AcquireLimiter     = moe.AcquireLimiter
	ExpertVisitor      = moe.ExpertVisitor
	ExpertGroupVisitor = moe.ExpertGroupVisitor
	ExpertPrefetcher   = moe.ExpertPrefetcher
	ExpertMats         = moe.ExpertMats
)

// Canonical tensor names.
const (
	nameEmbed  = "model.embed_tokens.weight"
	nameNorm   = "model.norm.weight"
	nameLMHead = "lm_head.weight"
)

func layerTensor(layer int, suffix string) string {
	return fmt.Sprintf("model.layers.%d.%s", layer, suffix)
}

// loader fetches tensors and checks their shapes, remembering the first
// error so New can read every tensor in a straight line.
type loader struct {
	w   Weights
	err error
}

func (l *loader) matrix(name string, rows, cols int) *kernels.Matrix {
	if l.err != nil {
		return nil
	}
	m, err := l.w.Matrix(name)
	if err != nil {
		l.err = fmt.Errorf("qwen35: tensor %s: %w", name, err)
		return nil
	}
	if err := blocks.CheckMatrix(m, rows, cols); err != nil {
		l.err = fmt.Errorf("qwen35: tensor %s: %w", name, err)
		return nil
	}
	return m
}

func (l *loader) vector(name string, n int) []float32 {
	if l.err != nil {
		return nil
	}
	v, err := l.w.Vector(name)
	if err != nil {
		l.err = fmt.Errorf("qwen35: tensor %s: %w", name, err)
		return nil
	}
	if len(v) != n {
		l.err = fmt.Errorf("qwen35: tensor %s has %d values, the geometry needs %d; the install does not match its manifest geometry", name, len(v), n)
		return nil
	}
	return v
}

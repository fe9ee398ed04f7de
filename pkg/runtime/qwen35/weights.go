package qwen35

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/kernels"
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

// Experts gives the routed experts of MoE layers; an implementation may read
// them from disk on demand.
type Experts interface {
	// Acquire returns gate [I, H], up [I, H] and down [H, I] for each id of
	// layer, in the order of ids. The matrices stay valid until release is
	// called; the model calls release exactly once when err is nil.
	Acquire(layer int, ids []int) (mats []ExpertMats, release func(), err error)
}

// AcquireLimiter is implemented by Experts that can hold only a bounded
// number of experts of a layer at once (a slot cache). The model then
// acquires a layer's experts in ascending batches of at most MaxAcquire ids,
// releasing each batch before the next. The batching never changes results.
type AcquireLimiter interface {
	MaxAcquire() int
}

// ExpertVisitor is implemented by Experts that can hand a layer's experts
// over one at a time as each becomes available (resident ones first, the
// others as their reads land), so computing one overlaps reading the next.
// When Experts implements it the model uses Visit instead of Acquire. Visit
// must call fn exactly once for every index of ids, in any order, on the
// caller's goroutine; the mats are valid only until fn returns. The order
// never changes results.
type ExpertVisitor interface {
	Visit(layer int, ids []int, fn func(i int, m ExpertMats) error) error
}

// ExpertGroupVisitor is ExpertVisitor handing over, in one call, every
// expert that is available at the same time (fn gets indices into ids and
// their mats, valid until it returns; every index exactly once overall).
// The model prefers it: in decode a group's gate and up products, and then
// its down products, each run as one parallel job instead of one per
// expert. Grouping never changes results.
type ExpertGroupVisitor interface {
	VisitGroups(layer int, ids []int, fn func(idx []int, mats []ExpertMats) error) error
}

// ExpertPrefetcher is implemented by Experts that can start reading
// experts before they are asked for (a slot cache on disk). In a decode
// step, as each layer ends, the model applies the next MoE layer's router
// to the hidden state as it stands (that layer's own router later sees it
// after attention) and passes the PrefetchWidth best-scoring experts, best
// first, to Prefetch. Prefetch must return without waiting for I/O and
// must not change what Acquire or Visit hand over: it only moves reads
// earlier. A PrefetchWidth of 0 skips the prediction.
type ExpertPrefetcher interface {
	PrefetchWidth() int
	Prefetch(layer int, ids []int)
}

// ExpertMats are the three matrices of one routed expert.
type ExpertMats struct{ Gate, Up, Down *kernels.Matrix }

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
	if err := checkMatrix(m, rows, cols); err != nil {
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

// checkMatrix verifies that m is rows×cols and that its buffers are exactly
// as long as its encoding needs, so a kernel can never read out of bounds.
func checkMatrix(m *kernels.Matrix, rows, cols int) error {
	if m == nil {
		return fmt.Errorf("nil matrix")
	}
	if m.Rows != rows || m.Cols != cols {
		return fmt.Errorf("shape [%d, %d], the geometry needs [%d, %d]; the install does not match its manifest geometry", m.Rows, m.Cols, rows, cols)
	}
	return m.Validate()
}

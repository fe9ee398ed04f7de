package qwen38

import (
	"fmt"
	"slices"

	"github.com/nvmai/nvmai/pkg/models/blocks"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Arch is the architecture name of an install manifest and of config.json's
// model_type.
const Arch = "qwen4_exp"

// LayerKind is the token mixer of one decoder layer.
type LayerKind uint8

const (
	LinearAttention LayerKind = iota // Gated DeltaNet
	SparseAttention                  // gated attention with the QSA indexer
)

func (k LayerKind) String() string {
	return blocks.KindName(uint8(k), "linear_attention", "qwen_sparse_attention")
}

// ParseLayerKind accepts the spellings of docs/qwen38-architecture.md §1.3:
// transformers 5.17 rewrites full_attention to qwen_sparse_attention.
func ParseLayerKind(s string) (LayerKind, error) {
	switch s {
	case "linear_attention":
		return LinearAttention, nil
	case "full_attention", "qwen_sparse_attention":
		return SparseAttention, nil
	}
	return 0, fmt.Errorf("qwen38: layer type %q: want \"linear_attention\", \"full_attention\" or \"qwen_sparse_attention\"", s)
}

// Config is the qwen4_exp text decoder's geometry in the form the forward
// pass uses (docs/qwen38-architecture.md §1.2, field names in comments).
type Config struct {
	VocabSize  int // vocab_size V
	HiddenSize int // hidden_size H: the width of one residual stream
	Layers     []LayerKind
	RMSNormEps float32
	MaxContext int // max_position_embeddings

	// Gated residual (hyper-connections).
	Streams int // hc_count S
	LowRank int // hc_lowrank r

	// Attention.
	NumHeads   int // num_attention_heads Hq
	NumKVHeads int // num_key_value_heads Hkv
	HeadDim    int // head_dim Dh
	RopeTheta  float64
	RotaryDim  int // int(Dh · partial_rotary_factor)

	// QSA indexer.
	IndexerHeads  int // indexer_n_heads
	IndexerDim    int // indexer_head_dim
	IndexerBudget int // indexer_budget: tokens kept
	IndexerBlock  int // indexer_compress_ratio: tokens per block

	// Gated DeltaNet.
	ConvKernel       int  // linear_conv_kernel_dim K
	LinearKeyHeads   int  // Hk
	LinearValueHeads int  // Hv
	LinearKeyDim     int  // Dk
	LinearValueDim   int  // Dv
	SigmoidGate      bool // output_gate_type "sigmoid" (else silu)

	// MoE.
	NumExperts         int // E
	ExpertsPerToken    int // k
	ExpertIntermediate int // I
	SharedIntermediate int // Is

	// PLE / hashed n-gram layer.
	PLELayers       []int // decoder layer indices (0-based, sorted) carrying PLE
	PLEDim          int   // ple_embed_dim Dp
	PLEConvKernel   int   // ple_conv_kernel_size Kp
	NgramSize       int   // ngram_size N
	HeadsPerNgram   int   // heads_per_ngram
	NgramVocabBase  int64 // ngram_vocab_size_base
	NgramRowsDivide int64 // make_ngram_vocab_size_divisible_by
	Seed            int64 // seed
	EOS             int   // the first eos_token_id: the n-gram context resets after it
}

// NgramHeads is NH = (N−1)·heads_per_ngram.
func (c Config) NgramHeads() int { return (c.NgramSize - 1) * c.HeadsPerNgram }

// NgramRowWidth is dr = Dp / NH, the width of one table row.
func (c Config) NgramRowWidth() int { return c.PLEDim / c.NgramHeads() }

// StreamWidth is S·H, the width of the residual.
func (c Config) StreamWidth() int { return c.Streams * c.HiddenSize }

// ConvChannels is C = 2·Hk·Dk + Hv·Dv.
func (c Config) ConvChannels() int {
	return 2*c.LinearKeyHeads*c.LinearKeyDim + c.LinearValueHeads*c.LinearValueDim
}

// trunk is the part of c that package blocks checks for every architecture.
func (c Config) trunk() blocks.Trunk {
	return blocks.Trunk{VocabSize: c.VocabSize, HiddenSize: c.HiddenSize, Layers: len(c.Layers), MaxContext: c.MaxContext,
		Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim, RotaryDim: c.RotaryDim, RopeTheta: c.RopeTheta,
		RMSNormEps: c.RMSNormEps, ConvKernel: c.ConvKernel, LinearKeyHeads: c.LinearKeyHeads,
		LinearValueHeads: c.LinearValueHeads, LinearKeyDim: c.LinearKeyDim, LinearValueDim: c.LinearValueDim}
}

// IndexerBlocks is B = budget / cr, the complete blocks a query keeps.
func (c Config) IndexerBlocks() int { return c.IndexerBudget / c.IndexerBlock }

func (c Config) kvDim() int    { return c.NumKVHeads * c.HeadDim }
func (c Config) valueDim() int { return c.LinearValueHeads * c.LinearValueDim }

// Validate reproduces transformers 5.17's checks (§1.3) and the runtime's.
func (c Config) Validate() error {
	more := []blocks.Field{
		{Name: "hc_lowrank", Value: c.LowRank},
		{Name: "indexer_n_heads", Value: c.IndexerHeads}, {Name: "indexer_head_dim", Value: c.IndexerDim},
		{Name: "indexer_budget", Value: c.IndexerBudget}, {Name: "indexer_compress_ratio", Value: c.IndexerBlock},
		{Name: "num_experts", Value: c.NumExperts}, {Name: "num_experts_per_tok", Value: c.ExpertsPerToken},
		{Name: "moe_intermediate_size", Value: c.ExpertIntermediate},
		{Name: "shared_expert_intermediate_size", Value: c.SharedIntermediate},
	}
	if err := c.trunk().Check("qwen38", more...); err != nil {
		return err
	}
	switch {
	case c.Streams <= 1:
		return fmt.Errorf("qwen38: config hc_count %d must be above 1", c.Streams)
	case c.RotaryDim > c.IndexerDim:
		return fmt.Errorf("qwen38: config rotary dim %d exceeds indexer_head_dim %d", c.RotaryDim, c.IndexerDim)
	case c.IndexerBudget%c.IndexerBlock != 0:
		return fmt.Errorf("qwen38: config indexer_budget %d is not a multiple of indexer_compress_ratio %d", c.IndexerBudget, c.IndexerBlock)
	case c.ExpertsPerToken > c.NumExperts:
		return fmt.Errorf("qwen38: config num_experts_per_tok %d exceeds num_experts %d", c.ExpertsPerToken, c.NumExperts)
	}
	for i, k := range c.Layers {
		if k != LinearAttention && k != SparseAttention {
			return fmt.Errorf("qwen38: config layer %d has unknown kind %v", i, k)
		}
	}
	return c.validatePLE()
}

// The n-gram hashing's ceilings are packexperts' (one literal each): they
// bound the trial-division prime search New runs.
const (
	maxNgramSize      = packexperts.MaxNGramSize
	maxHeadsPerNgram  = packexperts.MaxHeadsPerNGram
	maxNgramVocabBase = packexperts.MaxNGramVocabBase
	maxNgramPrimes    = packexperts.MaxNGramPrimes
)

func (c Config) validatePLE() error {
	if len(c.PLELayers) == 0 {
		return nil
	}
	if !slices.IsSorted(c.PLELayers) {
		return fmt.Errorf("qwen38: config PLE layers %v are not sorted", c.PLELayers)
	}
	for i, l := range c.PLELayers {
		if l < 0 || l >= len(c.Layers) || (i > 0 && c.PLELayers[i-1] == l) {
			return fmt.Errorf("qwen38: config ple_layer_ids %v: each must be a distinct layer in [1, %d]", c.PLELayers, len(c.Layers))
		}
		if c.Layers[l] != LinearAttention {
			return fmt.Errorf("qwen38: config ple_layer_ids: layer %d (one-indexed) is not a linear_attention layer", l+1)
		}
	}
	switch {
	case c.NgramSize < 2 || c.NgramSize > maxNgramSize || c.HeadsPerNgram <= 0 || c.HeadsPerNgram > maxHeadsPerNgram:
		return fmt.Errorf("qwen38: config ngram_size %d must be in [2, %d] and heads_per_ngram %d in [1, %d]", c.NgramSize, maxNgramSize, c.HeadsPerNgram, maxHeadsPerNgram)
	case c.NgramVocabBase > maxNgramVocabBase || int64(len(c.PLELayers)*c.NgramHeads()) > maxNgramPrimes:
		return fmt.Errorf("qwen38: config ngram_vocab_size_base %d (at most %d) and %d PLE layers × %d heads (at most %d primes) would make the prime search unbounded", c.NgramVocabBase, int64(maxNgramVocabBase), len(c.PLELayers), c.NgramHeads(), maxNgramPrimes)
	case c.PLEDim <= 0 || c.PLEDim%c.NgramHeads() != 0:
		return fmt.Errorf("qwen38: config ple_embed_dim %d is not a positive multiple of (ngram_size−1)·heads_per_ngram = %d", c.PLEDim, c.NgramHeads())
	case c.PLEConvKernel <= 0:
		return fmt.Errorf("qwen38: config ple_conv_kernel_size %d must be positive", c.PLEConvKernel)
	case c.NgramVocabBase < 2 || c.NgramRowsDivide <= 0:
		return fmt.Errorf("qwen38: config ngram_vocab_size_base %d must be at least 2 and make_ngram_vocab_size_divisible_by %d positive", c.NgramVocabBase, c.NgramRowsDivide)
	case c.EOS < 0 || c.EOS >= c.VocabSize:
		return fmt.Errorf("qwen38: config eos_token_id %d is outside the vocabulary [0, %d)", c.EOS, c.VocabSize)
	}
	return nil
}

// KVBytes is what tokens tokens of context hold in the attention layers
// (§4): keys and values at the KV width bits, the indexer's raw keys and
// the block key of every complete block in float32.
func (c Config) KVBytes(tokens, bits int) int64 {
	var attn int64
	for _, k := range c.Layers {
		if k == SparseAttention {
			attn++
		}
	}
	t := int64(tokens)
	indexer := 4 * (t*int64(c.IndexerDim) + t/int64(c.IndexerBlock)*int64(c.IndexerDim))
	return attn * (t*blocks.KVBytesPerToken(bits, c.kvDim(), c.HeadDim) + indexer)
}

// FixedStateBytes is the state that does not grow with the context: every
// GDN layer's conv window and recurrent matrices and every PLE layer's
// conv window (float32).
func (c Config) FixedStateBytes() int64 {
	var n int64
	for _, k := range c.Layers {
		if k == LinearAttention {
			n += int64((c.ConvKernel-1)*c.ConvChannels() + c.LinearValueHeads*c.LinearKeyDim*c.LinearValueDim)
		}
	}
	n += int64(len(c.PLELayers) * (c.PLEConvKernel - 1) * c.NgramSize * c.StreamWidth())
	return 4 * n
}

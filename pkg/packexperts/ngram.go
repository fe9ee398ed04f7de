package packexperts

import (
	"fmt"
	"slices"

	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/ngramhash"
)

// ArchQwen4Exp is Qwen3.8-Flash-Next: the qwen3_5_moe trunk in four
// residual streams plus a hashed n-gram (PLE) layer and the QSA indexer.
const ArchQwen4Exp = "qwen4_exp"

// NGramDir holds the n-gram tables of a qwen4_exp install.
const NGramDir = "ngram"

// NGramFileName is the n-gram table of a PLE layer, relative to the install.
func NGramFileName(layer int) string { return fmt.Sprintf("%s/layer-%03d.bin", NGramDir, layer) }

// Ceilings of the n-gram hashing: they bound the prime search (trial
// division up to √base) and the table, far above the release (base 2·10⁷,
// 16 heads, 3.2·10⁸ rows).
const (
	MaxNGramVocabBase = 1 << 32
	MaxNGramPrimes    = 4096    // primes searched over all PLE layers
	MaxNGramRows      = 1 << 36 // rows of one table
	MaxNGramDivisor   = 1 << 20 // make_ngram_vocab_size_divisible_by
	MaxNGramSize      = 16      // ngram_size
	MaxHeadsPerNGram  = 256     // heads_per_ngram
)

// NGramConstants are one PLE layer's hashing constants (q38 §3.4).
type NGramConstants struct {
	Multipliers []int64 // layer_multipliers, ngram_size values
	VocabSizes  []int64 // ngram_heads_vocab_sizes: the primes P_j
	Offsets     []int64 // ngram_heads_offsets: O_j = Σ_{j'<j} P_j'
	Rows        int64   // R_tab = ⌈Σ P_j / d⌉·d
}

// ComputeNGramConstants recomputes what transformers 5.17 stores in the
// checkpoint's I64 buffers for the k-th PLE layer (its rank in the sorted
// ple_layer_ids) of a vocabulary of vocab ids.
func ComputeNGramConstants(q *Qwen4ExpGeometry, vocab, k int) (NGramConstants, error) {
	if err := q.checkHashing(); err != nil {
		return NGramConstants{}, err
	}
	if vocab <= 0 || k < 0 || k >= len(q.PLELayers) {
		return NGramConstants{}, fmt.Errorf("PLE layer rank %d of %d, vocab %d", k, len(q.PLELayers), vocab)
	}
	h := ngramhash.Layer(ngramhash.Params{Seed: q.Seed, Vocab: vocab, NGramSize: q.NGramSize, Heads: q.NGramHeads(),
		VocabBase: q.NGramVocabSizeBase, Divisor: q.NGramVocabSizeDivisibleBy}, k)
	c := NGramConstants{Multipliers: h.Multipliers, VocabSizes: h.Primes, Offsets: h.Offsets, Rows: h.Rows}
	if c.Rows > MaxNGramRows {
		return NGramConstants{}, fmt.Errorf("the n-gram table would have %d rows, over the ceiling of %d", c.Rows, int64(MaxNGramRows))
	}
	return c, nil
}

func (q *Qwen4ExpGeometry) checkHashing() error {
	switch {
	case q.NGramSize < 2 || q.NGramSize > MaxNGramSize:
		return fmt.Errorf("ngram_size %d must be between 2 and %d", q.NGramSize, MaxNGramSize)
	case q.HeadsPerNGram < 1 || q.HeadsPerNGram > MaxHeadsPerNGram:
		return fmt.Errorf("heads_per_ngram %d must be between 1 and %d", q.HeadsPerNGram, MaxHeadsPerNGram)
	case q.NGramVocabSizeBase < 2 || q.NGramVocabSizeBase > MaxNGramVocabBase:
		return fmt.Errorf("ngram_vocab_size_base %d must be between 2 and %d", q.NGramVocabSizeBase, int64(MaxNGramVocabBase))
	case q.NGramVocabSizeDivisibleBy < 1 || q.NGramVocabSizeDivisibleBy > MaxNGramDivisor:
		return fmt.Errorf("make_ngram_vocab_size_divisible_by %d must be between 1 and %d", q.NGramVocabSizeDivisibleBy, MaxNGramDivisor)
	case len(q.PLELayers)*q.NGramHeads() > MaxNGramPrimes:
		return fmt.Errorf("%d PLE layers × %d n-gram heads need %d primes, over the ceiling of %d", len(q.PLELayers), q.NGramHeads(), len(q.PLELayers)*q.NGramHeads(), MaxNGramPrimes)
	}
	return nil
}

// NGramLayout packs rows of rowWidth bfloat16 values whole into blocks of
// 4096 bytes (a multiple of it for rows over a page), so that one aligned
// direct read fetches any row (docs/qwen38.md "Row address").
func NGramLayout(rows int64, rowWidth int) (rowBytes, rowsPerBlock, blockBytes, fileSize int64, err error) {
	if rows <= 0 || rows > MaxNGramRows || rowWidth <= 0 || rowWidth > 1<<20 {
		return 0, 0, 0, 0, fmt.Errorf("n-gram table of %d rows × %d values is out of range", rows, rowWidth)
	}
	rowBytes = 2 * int64(rowWidth)
	blockBytes, rowsPerBlock = limits.DirectIOAlign, limits.DirectIOAlign/rowBytes
	if rowsPerBlock == 0 {
		blockBytes, rowsPerBlock = (rowBytes+limits.DirectIOAlign-1)/limits.DirectIOAlign*limits.DirectIOAlign, 1
	}
	fileSize = (rows + rowsPerBlock - 1) / rowsPerBlock * blockBytes
	return rowBytes, rowsPerBlock, blockBytes, fileSize, nil
}

// RowOffset is the byte offset of global row g in the table's file.
func (n *NGram) RowOffset(g int64) int64 {
	return g/n.RowsPerBlock*n.BlockBytes + g%n.RowsPerBlock*n.RowBytes
}

// FileSize is the size the table's file must have.
func (n *NGram) FileSize() int64 {
	return (n.Rows + n.RowsPerBlock - 1) / n.RowsPerBlock * n.BlockBytes
}

// PlanNGram returns the table entry of the k-th PLE layer: layout and the
// recomputed constants.
func PlanNGram(g *Geometry, k int) (NGram, error) {
	q := g.Qwen4Exp
	c, err := ComputeNGramConstants(q, g.VocabSize, k)
	if err != nil {
		return NGram{}, err
	}
	rb, rpb, bb, _, err := NGramLayout(c.Rows, q.NGramRowWidth())
	if err != nil {
		return NGram{}, err
	}
	return NGram{
		Layer: q.PLELayers[k], File: NGramFileName(q.PLELayers[k]), Rows: c.Rows, RowWidth: q.NGramRowWidth(),
		DType: DTypeBF16, Bits: 16, RowBytes: rb, RowsPerBlock: rpb, BlockBytes: bb,
		Multipliers: c.Multipliers, VocabSizes: c.VocabSizes, Offsets: c.Offsets,
	}, nil
}

// validateNGram checks the tables against the geometry: one per PLE layer,
// layout and constants exactly as PlanNGram gives them, files listed at
// their size.
func (m *Manifest) validateNGram(sizes map[string]int64) error {
	if m.Architecture != ArchQwen4Exp {
		if m.NGram != nil {
			return formatErr("ngram: only a qwen4_exp install has n-gram tables")
		}
		return nil
	}
	layers := m.Geometry.Qwen4Exp.PLELayers
	if len(m.NGram) != len(layers) {
		return formatErr("ngram: %d tables for %d PLE layers", len(m.NGram), len(layers))
	}
	for k := range m.NGram {
		got := &m.NGram[k]
		want, err := PlanNGram(&m.Geometry, k)
		if err != nil {
			return formatErr("ngram: layer %d: %v", layers[k], err)
		}
		if err := sameNGram(got, &want); err != nil {
			return formatErr("ngram: table %d (layer %d): %v", k, layers[k], err)
		}
		if size, ok := sizes[got.File]; !ok || size != got.FileSize() {
			return formatErr("ngram: %s must be listed with size %d (found %d)", got.File, got.FileSize(), size)
		}
	}
	return nil
}

func sameNGram(got, want *NGram) error {
	switch {
	case got.Layer != want.Layer || got.File != want.File:
		return fmt.Errorf("layer %d file %q, want layer %d file %q", got.Layer, got.File, want.Layer, want.File)
	case got.Rows != want.Rows || got.RowWidth != want.RowWidth:
		return fmt.Errorf("%d rows × %d, the geometry gives %d × %d", got.Rows, got.RowWidth, want.Rows, want.RowWidth)
	case got.DType != want.DType || got.Bits != want.Bits:
		return fmt.Errorf("%s %d-bit, only BF16 16-bit tables are written", got.DType, got.Bits)
	case got.RowBytes != want.RowBytes || got.RowsPerBlock != want.RowsPerBlock || got.BlockBytes != want.BlockBytes:
		return fmt.Errorf("row layout %d B × %d per %d-byte block, want %d × %d per %d", got.RowBytes, got.RowsPerBlock, got.BlockBytes, want.RowBytes, want.RowsPerBlock, want.BlockBytes)
	case !slices.Equal(got.Multipliers, want.Multipliers):
		return fmt.Errorf("multipliers %v differ from the recomputed %v", got.Multipliers, want.Multipliers)
	case !slices.Equal(got.VocabSizes, want.VocabSizes):
		return fmt.Errorf("vocab_sizes %v differ from the recomputed primes %v", got.VocabSizes, want.VocabSizes)
	case !slices.Equal(got.Offsets, want.Offsets):
		return fmt.Errorf("offsets %v differ from the recomputed %v", got.Offsets, want.Offsets)
	}
	return nil
}

// validate checks a qwen4_exp geometry's own fields against the rest of g.
func (q *Qwen4ExpGeometry) validate(g *Geometry) error {
	pos := map[string]int{"hc_count": q.HCCount, "hc_lowrank": q.HCLowRank, "ple_embed_dim": q.PLEEmbedDim,
		"ple_conv_kernel_size": q.PLEConvKernelSize, "split_ngram_parts": q.SplitNGramParts,
		"indexer_n_heads": q.IndexerNHeads, "indexer_kv_heads": q.IndexerKVHeads, "indexer_head_dim": q.IndexerHeadDim,
		"indexer_budget": q.IndexerBudget, "indexer_compress_ratio": q.IndexerCompressRatio}
	for _, k := range sortedKeys(pos) {
		if pos[k] <= 0 {
			return fmt.Errorf("qwen4_exp.%s must be positive, got %d", k, pos[k])
		}
	}
	if err := q.checkHashing(); err != nil {
		return fmt.Errorf("qwen4_exp: %v", err)
	}
	rd := int(float64(g.HeadDim) * g.PartialRotaryFactor)
	switch {
	case q.HCCount < 2:
		return fmt.Errorf("qwen4_exp.hc_count %d must be at least 2", q.HCCount)
	case q.OutputGateType != "sigmoid" && q.OutputGateType != "silu":
		return fmt.Errorf("qwen4_exp.output_gate_type %q is not sigmoid or silu", q.OutputGateType)
	case q.IndexerKVHeads != 1:
		return fmt.Errorf("qwen4_exp.indexer_kv_heads %d must be 1", q.IndexerKVHeads)
	case q.IndexerBudget%q.IndexerCompressRatio != 0:
		return fmt.Errorf("qwen4_exp.indexer_budget %d is not a multiple of indexer_compress_ratio %d", q.IndexerBudget, q.IndexerCompressRatio)
	case rd > q.IndexerHeadDim:
		return fmt.Errorf("rotary dim %d exceeds qwen4_exp.indexer_head_dim %d", rd, q.IndexerHeadDim)
	case q.PLEEmbedDim%q.NGramHeads() != 0:
		return fmt.Errorf("qwen4_exp.ple_embed_dim %d is not a multiple of the %d n-gram heads", q.PLEEmbedDim, q.NGramHeads())
	case q.PLEResetTokenID < 0 || q.PLEResetTokenID >= g.VocabSize:
		return fmt.Errorf("qwen4_exp.ple_reset_token_id %d is outside the vocabulary (%d)", q.PLEResetTokenID, g.VocabSize)
	}
	for i, l := range q.PLELayers {
		if l < 0 || l >= g.NumLayers || (i > 0 && l <= q.PLELayers[i-1]) {
			return fmt.Errorf("qwen4_exp.ple_layers %v must be distinct layers in [0, %d), ascending", q.PLELayers, g.NumLayers)
		}
		if g.LayerTypes[l] != "linear_attention" {
			return fmt.Errorf("qwen4_exp.ple_layers: layer %d is %s; PLE sits on linear_attention layers", l, g.LayerTypes[l])
		}
	}
	return nil
}

// Package packexperts owns the nvmai install format: manifest.json, the
// resident weights file and the per-layer packed expert files. The converter
// writes it, the runtime and the verifier read it; docs/format.md is its
// specification.
package packexperts

// FormatName and FormatVersion identify an install; a reader refuses any other.
const (
	FormatName    = "nvmai-install"
	FormatVersion = 1
)

// File names inside an install directory.
const (
	ManifestFile  = "manifest.json"
	ReceiptFile   = "verified-install.json"
	ResidentFile  = "resident.bin"
	ExpertDir     = "experts"
	DraftFile     = "draft/mtp.safetensors"
	ResidentAlign = 64 // every resident blob starts on a cache line
)

// Tensor storage types written in manifests.
const (
	DTypeBF16 = "BF16"
	DTypeF16  = "F16"
	DTypeF32  = "F32"
	DTypeU32  = "U32" // MLX affine packed weights; see Bits and GroupSize
)

// Manifest describes one install. Field order is the on-disk order.
type Manifest struct {
	Format        string    `json:"format"`
	FormatVersion int       `json:"format_version"`
	WrittenBy     string    `json:"written_by,omitempty"` // the nvmai build that wrote it (version.String()); absent in older installs
	ModelID       string    `json:"model_id"`
	Architecture  string    `json:"architecture"` // "qwen3_5_moe", "qwen3_5" or "qwen4_exp"
	Bits          int       `json:"bits"`         // nominal width: 4, 8 or 16
	Geometry      Geometry  `json:"geometry"`
	Source        Source    `json:"source"`
	Tensors       []Tensor  `json:"tensors"`
	Experts       *Experts  `json:"experts,omitempty"`
	NGram         []NGram   `json:"ngram,omitempty"` // qwen4_exp: one hashed n-gram table per PLE layer
	Draft         *Draft    `json:"draft,omitempty"`
	Skipped       []Skipped `json:"skipped,omitempty"`
	Files         []Payload `json:"files"` // every payload file with its size; hashes live in the receipt
}

// Geometry is the text decoder's shape, copied from config.json text_config.
type Geometry struct {
	VocabSize                    int      `json:"vocab_size"`
	HiddenSize                   int      `json:"hidden_size"`
	NumLayers                    int      `json:"num_hidden_layers"`
	LayerTypes                   []string `json:"layer_types"`
	RMSNormEps                   float64  `json:"rms_norm_eps"`
	HiddenAct                    string   `json:"hidden_act"`
	NumAttentionHeads            int      `json:"num_attention_heads"`
	NumKeyValueHeads             int      `json:"num_key_value_heads"`
	HeadDim                      int      `json:"head_dim"`
	RopeTheta                    float64  `json:"rope_theta"`
	PartialRotaryFactor          float64  `json:"partial_rotary_factor"`
	MaxPositionEmbeddings        int      `json:"max_position_embeddings"`
	LinearConvKernelDim          int      `json:"linear_conv_kernel_dim"`
	LinearNumKeyHeads            int      `json:"linear_num_key_heads"`
	LinearNumValueHeads          int      `json:"linear_num_value_heads"`
	LinearKeyHeadDim             int      `json:"linear_key_head_dim"`
	LinearValueHeadDim           int      `json:"linear_value_head_dim"`
	IntermediateSize             int      `json:"intermediate_size,omitempty"`
	NumExperts                   int      `json:"num_experts,omitempty"`
	NumExpertsPerTok             int      `json:"num_experts_per_tok,omitempty"`
	MoeIntermediateSize          int      `json:"moe_intermediate_size,omitempty"`
	SharedExpertIntermediateSize int      `json:"shared_expert_intermediate_size,omitempty"`
	TieWordEmbeddings            bool     `json:"tie_word_embeddings"`
	// Qwen4Exp holds what only qwen4_exp has (docs/qwen38.md); nil for
	// every other architecture, so their manifests are unchanged.
	Qwen4Exp *Qwen4ExpGeometry `json:"qwen4_exp,omitempty"`
}

// Qwen4ExpGeometry is the part of a qwen4_exp text_config beyond the
// qwen3_5_moe fields: hyper-connections, the PLE n-gram layer and the QSA
// indexer. docs/qwen38.md documents every field and its config.json source.
type Qwen4ExpGeometry struct {
	HCCount                   int    `json:"hc_count"`
	HCLowRank                 int    `json:"hc_lowrank"`
	OutputGateType            string `json:"output_gate_type"`
	NormTopKProb              bool   `json:"norm_topk_prob"`
	PLELayers                 []int  `json:"ple_layers"` // zero-based decoder layers, sorted
	PLEEmbedDim               int    `json:"ple_embed_dim"`
	PLEConvKernelSize         int    `json:"ple_conv_kernel_size"`
	NGramSize                 int    `json:"ngram_size"`
	HeadsPerNGram             int    `json:"heads_per_ngram"`
	NGramVocabSizeBase        int64  `json:"ngram_vocab_size_base"`
	NGramVocabSizeDivisibleBy int64  `json:"make_ngram_vocab_size_divisible_by"`
	Seed                      int64  `json:"seed"`
	SplitNGramParts           int    `json:"split_ngram_parts"`
	PLEResetTokenID           int    `json:"ple_reset_token_id"`
	IndexerNHeads             int    `json:"indexer_n_heads"`
	IndexerKVHeads            int    `json:"indexer_kv_heads"`
	IndexerHeadDim            int    `json:"indexer_head_dim"`
	IndexerBudget             int    `json:"indexer_budget"`
	IndexerCompressRatio      int    `json:"indexer_compress_ratio"`
}

// NGramHeads is NH = (ngram_size − 1) · heads_per_ngram, the table rows one
// token reads.
func (q *Qwen4ExpGeometry) NGramHeads() int { return (q.NGramSize - 1) * q.HeadsPerNGram }

// NGramRowWidth is dr = ple_embed_dim / NH, the values of one table row.
func (q *Qwen4ExpGeometry) NGramRowWidth() int { return q.PLEEmbedDim / q.NGramHeads() }

// NGram is one PLE layer's hashed n-gram table: its file and row layout
// (docs/qwen38.md "ngram") and the int64 hashing constants, read from the
// checkpoint's I64 buffers and checked against their recomputation.
type NGram struct {
	Layer        int     `json:"layer"`
	File         string  `json:"file"`
	Rows         int64   `json:"rows"`
	RowWidth     int     `json:"row_width"`
	DType        string  `json:"dtype"`
	Bits         int     `json:"bits"`
	RowBytes     int64   `json:"row_bytes"`
	RowsPerBlock int64   `json:"rows_per_block"`
	BlockBytes   int64   `json:"block_bytes"`
	Multipliers  []int64 `json:"multipliers"`
	VocabSizes   []int64 `json:"vocab_sizes"`
	Offsets      []int64 `json:"offsets"`
}

// Source identifies what the install was converted from.
type Source struct {
	Repo     string       `json:"repo,omitempty"`
	Revision string       `json:"revision,omitempty"`
	Files    []SourceFile `json:"files"` // every source file read, sorted by name
}

// SourceFile is one file of the source snapshot with its sha256.
type SourceFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Range is a byte range inside a file.
type Range struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
}

// Tensor is one resident tensor. Shape is logical (unpacked) [rows, cols] for
// quantized tensors. Quantized tensors (DType U32, Bits 4 or 8) carry BF16
// Scales and Biases of shape [rows, cols/GroupSize].
type Tensor struct {
	Name      string  `json:"name"`
	DType     string  `json:"dtype"`
	Bits      int     `json:"bits"`
	GroupSize int     `json:"group_size,omitempty"`
	Shape     []int64 `json:"shape"`
	File      string  `json:"file"`
	Offset    int64   `json:"offset"`
	Length    int64   `json:"length"`
	Scales    *Range  `json:"scales,omitempty"`
	Biases    *Range  `json:"biases,omitempty"`
}

// Experts describes the packed routed experts: one file per MoE layer holding
// expert e at e*Stride; Parts gives the layout inside one expert (offsets
// relative to the expert's start), identical for every expert of every layer.
type Experts struct {
	Count  int           `json:"count"`
	TopK   int           `json:"top_k"`
	Stride int64         `json:"stride"`
	Parts  []Tensor      `json:"parts"` // gate, up, down; File is empty
	Layers []ExpertLayer `json:"layers"`
}

// ExpertLayer is the expert file of one decoder layer.
type ExpertLayer struct {
	Layer int    `json:"layer"`
	File  string `json:"file"`
}

// Draft records the multi-token-prediction head kept aside for a future
// speculative decoder; the runtime does not read it.
type Draft struct {
	File    string `json:"file"`
	Tensors int    `json:"tensors"`
}

// Skipped counts source tensors deliberately not converted, by reason.
type Skipped struct {
	Prefix string `json:"prefix"`
	Count  int    `json:"count"`
	Reason string `json:"reason"`
}

// Payload is one payload file of the install (everything but the manifest
// and the receipt).
type Payload struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

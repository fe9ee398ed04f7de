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
	Architecture  string    `json:"architecture"` // "qwen3_5_moe" or "qwen3_5"
	Bits          int       `json:"bits"`         // nominal width: 4, 8 or 16
	Geometry      Geometry  `json:"geometry"`
	Source        Source    `json:"source"`
	Tensors       []Tensor  `json:"tensors"`
	Experts       *Experts  `json:"experts,omitempty"`
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
	// RopeScaling is config.json's YaRN, resolved; absent (nil) in
	// installs of models with plain RoPE, and in every older install.
	RopeScaling *RopeScaling `json:"rope_scaling,omitempty"`
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

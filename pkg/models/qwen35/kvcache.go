package qwen35

import (
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// KV cache widths (docs/kv-cache.md). The Gated DeltaNet state is float32
// whatever the width. The cache itself is blocks.KVCache, shared with
// qwen38.
const (
	KVFloat32 = model.KVFloat32 // float32, the reference
	KVBF16    = model.KVBF16    // bfloat16
	KVInt8    = model.KVInt8    // int8 with one float32 scale per group of blocks.KVGroupMax values
)

// DefaultKVBits is the width the runtime and the CLIs use unless told
// otherwise. A zero StateOptions.KVBits means KVFloat32: the model package's
// own tests compare float32 against transformers.
const DefaultKVBits = model.DefaultKVBits

// ValidKVBits reports whether bits is a supported cache width.
func ValidKVBits(bits int) bool { return model.ValidKVBits(bits) }

// kvCache is the K and V of one full-attention layer.
type kvCache = blocks.KVCache

// KVBytesPerToken is what one token costs in one full-attention layer's
// K and V at the given width.
func (c Config) KVBytesPerToken(bits int) int64 {
	return blocks.KVBytesPerToken(bits, c.kvDim(), c.HeadDim)
}

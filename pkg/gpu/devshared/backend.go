package devshared

import (
	"cmp"
	"fmt"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/model"
)

// Info is a GPU engine's model.Info on dev.
func Info(dev *cuda.Device, arch string, vocab, maxContext int) model.Info {
	return model.Info{Name: fmt.Sprintf("gpu (%s, sm_%d)", dev.Name, dev.Arch), Architecture: arch, Device: model.GPU,
		VocabSize: vocab, MaxContext: maxContext}
}

// SessionKVBits is the KV width of a session's state: a zero kvBits is
// model.DefaultKVBits, as on the CPU engine; engine prefixes the error.
func SessionKVBits(engine string, kvBits int) (int, error) {
	bits := cmp.Or(kvBits, model.DefaultKVBits)
	if !model.ValidKVBits(bits) {
		return 0, fmt.Errorf("%s: KV cache width %d bits: use 8, 16 or 32", engine, kvBits)
	}
	return bits, nil
}

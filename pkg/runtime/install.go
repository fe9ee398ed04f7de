// Package runtime loads nvmai installs and generates text with them. It reads
// installs and nothing else: it never imports the converter or the
// downloader. Model math lives in per-architecture packages (qwen35,
// qwen38) and device engines (gpu), which it reaches only through the
// engine surface of package model: Load looks the install's architecture
// and the device up in model's registry, and sessions drive a model.State.
// This package wires an install's bytes, the expert cache, the tokenizer
// and sampling around them.
package runtime

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/nvmai/nvmai/internal/hugemem"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/quant"
	"github.com/nvmai/nvmai/pkg/receipt"
)

// Install is an opened install: its manifest and the resident weights mapped
// read-only into memory.
type Install struct {
	Dir          string
	Manifest     *packexperts.Manifest
	resident     []byte // resident.bin: residentCopy's bytes or a read-only mapping of the file
	residentCopy *hugemem.Region
	hotStart     int64 // resident[hotStart:] is read whole every token (all but a leading, untied embedding)
	tensors      map[string]*packexperts.Tensor
}

// OpenInstall validates dir's manifest, checks every payload file's size
// against the manifest and the receipt (a full re-hash is nvmai-verify's
// job), and maps the resident weights.
func OpenInstall(dir string) (*Install, error) {
	m, _, err := packexperts.ReadManifest(dir)
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("%s is not an nvmai install (no %s); create one with nvmai-convert or nvmai-install", dir, packexperts.ManifestFile)
	}
	if err != nil {
		return nil, err
	}
	if err := checkSizes(dir, m); err != nil {
		return nil, err
	}
	in := &Install{Dir: dir, Manifest: m, tensors: map[string]*packexperts.Tensor{}}
	for i := range m.Tensors {
		in.tensors[m.Tensors[i].Name] = &m.Tensors[i]
	}
	if err := in.loadResident(filepath.Join(dir, packexperts.ResidentFile)); err != nil {
		return nil, err
	}
	return in, nil
}

func checkSizes(dir string, m *packexperts.Manifest) error {
	rc, err := receipt.Read(filepath.Join(dir, packexperts.ReceiptFile))
	if err != nil {
		return fmt.Errorf("%s: no valid receipt (%v); run nvmai-verify --verify-install %s", dir, err, dir)
	}
	if probs := receipt.Check(dir, rc, false, 1); len(probs) > 0 {
		return fmt.Errorf("%s does not match its receipt: %s (and %d more); run nvmai-verify --verify-install %s", dir, probs[0], len(probs)-1, dir)
	}
	inReceipt := map[string]int64{}
	for _, f := range rc.Files {
		inReceipt[f.Name] = f.Size
	}
	for _, f := range m.Files {
		if size, ok := inReceipt[f.Name]; !ok || size != f.Size {
			return fmt.Errorf("%s: %s is %d bytes in the manifest but not so in the receipt; run nvmai-verify --verify-install %s", dir, f.Name, f.Size, dir)
		}
	}
	return nil
}

// loadResident loads resident.bin through hugemem.LoadFile: the embedding
// table (read one row per token) stays a file mapping; every other weight,
// read whole every token, is copied into huge-page-backed memory, where
// decode reads it measurably faster than through 4 KiB file pages (a TLB
// miss per page). NVMAI_HUGEPAGES=0 maps the whole file.
func (in *Install) loadResident(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	cold := in.coldResidentEnd()
	region, err := hugemem.LoadFile(f, st.Size(), cold)
	if err != nil {
		return err
	}
	in.hotStart = min(cold, st.Size())
	in.residentCopy, in.resident = region, region.Bytes
	return nil
}

// coldResidentEnd is where the embedding table's bytes end when they lead
// resident.bin and the install has its own lm_head (an install with tied
// embeddings reads the whole table every token, so nothing is cold).
func (in *Install) coldResidentEnd() int64 {
	embed, ok := in.tensors[embedTensor]
	if _, untied := in.tensors[lmHeadTensor]; !ok || !untied || embed.Offset != 0 {
		return 0
	}
	end := embed.Offset + embed.Length
	for _, part := range []*packexperts.Range{embed.Scales, embed.Biases} {
		if part != nil {
			end = max(end, part.Offset+part.Length)
		}
	}
	return end
}

const (
	embedTensor  = "model.embed_tokens.weight"
	lmHeadTensor = "lm_head.weight"
)

// Close unmaps the resident weights; matrices handed out become invalid.
func (in *Install) Close() error {
	err := in.residentCopy.Free()
	in.residentCopy, in.resident = nil, nil
	return err
}

// HotResident is the part of the resident weights a decode step reads
// whole: everything but an untied embedding table at the front.
func (in *Install) HotResident() []byte { return in.resident[in.hotStart:] }

// Has reports whether the install holds the resident tensor name.
func (in *Install) Has(name string) bool { _, ok := in.tensors[name]; return ok }

// Matrix returns a resident 2-D tensor as a kernels.Matrix viewing the mapping.
func (in *Install) Matrix(name string) (*kernels.Matrix, error) {
	t, ok := in.tensors[name]
	if !ok {
		return nil, fmt.Errorf("%s: tensor %s is not in the install", in.Dir, name)
	}
	if len(t.Shape) != 2 {
		return nil, fmt.Errorf("%s: tensor %s has shape %v, not a matrix", in.Dir, name, t.Shape)
	}
	return packexperts.MatrixView(in.resident, t)
}

// Vector returns a resident float tensor widened to float32, flattened.
func (in *Install) Vector(name string) ([]float32, error) {
	t, ok := in.tensors[name]
	if !ok {
		return nil, fmt.Errorf("%s: tensor %s is not in the install", in.Dir, name)
	}
	raw := in.resident[t.Offset : t.Offset+t.Length]
	switch t.DType {
	case packexperts.DTypeF32:
		out := make([]float32, len(raw)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return out, nil
	case packexperts.DTypeBF16:
		out := make([]float32, len(raw)/2)
		quant.WidenBF16(out, raw)
		return out, nil
	case packexperts.DTypeF16:
		out := make([]float32, len(raw)/2)
		quant.WidenF16(out, raw)
		return out, nil
	}
	return nil, fmt.Errorf("%s: tensor %s is %s, not a float vector", in.Dir, name, t.DType)
}

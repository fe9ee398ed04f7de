package packexperts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nvmai/nvmai/pkg/limits"
)

// Architectures the install format can describe.
const (
	ArchQwen35MoE = "qwen3_5_moe"
	ArchQwen35    = "qwen3_5"
)

// ErrFormat marks a manifest that is not a valid nvmai install description.
var ErrFormat = errors.New("invalid install manifest")

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// ReadManifest reads and validates DIR/manifest.json. It returns the raw
// bytes too, since the receipt hashes exactly those.
func ReadManifest(dir string) (*Manifest, []byte, error) {
	p := filepath.Join(dir, ManifestFile)
	raw, err := limits.ReadFile(p, limits.Manifest)
	if err != nil {
		return nil, nil, err
	}
	m, err := ParseManifest(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p, err)
	}
	return m, raw, nil
}

// ParseManifest decodes and validates a manifest.
func ParseManifest(raw []byte) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if dec.More() {
		return nil, formatErr("trailing data after the manifest object")
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// ValidRelPath reports whether name is a clean relative slash path that stays
// inside the install directory.
func ValidRelPath(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty file name")
	case strings.ContainsAny(name, "\\\x00"):
		return fmt.Errorf("file name %q contains a backslash or NUL", name)
	case path.IsAbs(name) || filepath.IsAbs(name):
		return fmt.Errorf("file name %q is absolute", name)
	case path.Clean(name) != name || name == "." || strings.HasPrefix(name, "../") || name == "..":
		return fmt.Errorf("file name %q is not a clean path inside the install", name)
	}
	return nil
}

// Validate checks the manifest's internal consistency: names, file list,
// every tensor's byte length against its dtype and shape, ranges inside
// their files and not overlapping, and the expert layout.
// maxWrittenBy bounds the written_by field: a version and a commit.
const maxWrittenBy = 256

func (m *Manifest) Validate() error {
	if m.Format != FormatName {
		return formatErr("format is %q, want %q", m.Format, FormatName)
	}
	if m.FormatVersion != FormatVersion {
		return formatErr("format_version %d is not supported by this nvmai (it reads version %d); convert the model again with this nvmai", m.FormatVersion, FormatVersion)
	}
	if len(m.WrittenBy) > maxWrittenBy || strings.ContainsFunc(m.WrittenBy, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return formatErr("written_by is over %d bytes or holds control characters", maxWrittenBy)
	}
	if m.Architecture != ArchQwen35MoE && m.Architecture != ArchQwen35 && m.Architecture != ArchQwen4Exp {
		return formatErr("architecture %q is not supported", m.Architecture)
	}
	if m.Bits != 4 && m.Bits != 8 && m.Bits != 16 {
		return formatErr("bits %d is not 4, 8 or 16", m.Bits)
	}
	if err := m.Geometry.Validate(m.Architecture); err != nil {
		return formatErr("geometry: %v", err)
	}
	sizes, err := m.fileSizes()
	if err != nil {
		return err
	}
	used := map[string][]Range{}
	if err := m.validateTensors(sizes, used); err != nil {
		return err
	}
	if err := m.validateExperts(sizes); err != nil {
		return err
	}
	if err := m.validateNGram(sizes); err != nil {
		return err
	}
	return checkOverlaps(used)
}

func (m *Manifest) fileSizes() (map[string]int64, error) {
	sizes := map[string]int64{}
	for _, f := range m.Files {
		if err := ValidRelPath(f.Name); err != nil {
			return nil, formatErr("files: %v", err)
		}
		if f.Name == ManifestFile || f.Name == ReceiptFile {
			return nil, formatErr("files: %s is not a payload file", f.Name)
		}
		if _, dup := sizes[f.Name]; dup {
			return nil, formatErr("files: %s listed twice", f.Name)
		}
		if f.Size < 0 {
			return nil, formatErr("files: %s has negative size", f.Name)
		}
		sizes[f.Name] = f.Size
	}
	return sizes, nil
}

func (m *Manifest) validateTensors(sizes map[string]int64, used map[string][]Range) error {
	seen := map[string]bool{}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if t.Name == "" || seen[t.Name] {
			return formatErr("tensor %q: empty or duplicate name", t.Name)
		}
		seen[t.Name] = true
		size, ok := sizes[t.File]
		if !ok {
			return formatErr("tensor %s: file %q is not in the file list", t.Name, t.File)
		}
		ranges, err := t.ranges()
		if err != nil {
			return err
		}
		for _, r := range ranges {
			if r.Offset < 0 || r.Length < 0 || r.Offset > size-r.Length {
				return formatErr("tensor %s: range [%d, +%d) lies outside %s (%d bytes)", t.Name, r.Offset, r.Length, t.File, size)
			}
		}
		used[t.File] = append(used[t.File], ranges...)
	}
	return nil
}

// ranges checks t's lengths against its encoding and returns its byte ranges.
func (t *Tensor) ranges() ([]Range, error) {
	enc := Encoding{t.DType, t.Bits}
	if err := enc.check(); err != nil {
		return nil, formatErr("tensor %s: %v", t.Name, err)
	}
	if len(t.Shape) == 0 || len(t.Shape) > limits.MaxTensorRank {
		return nil, formatErr("tensor %s: rank %d not in 1..%d", t.Name, len(t.Shape), limits.MaxTensorRank)
	}
	w, s, err := TensorBytes(enc, t.Shape)
	if err != nil {
		return nil, formatErr("tensor %s: %v", t.Name, err)
	}
	if t.Length != w {
		return nil, formatErr("tensor %s: length %d, but %s %d-bit %v needs %d bytes", t.Name, t.Length, t.DType, t.Bits, t.Shape, w)
	}
	out := []Range{{t.Offset, t.Length}}
	if !enc.Quantized() {
		if t.Scales != nil || t.Biases != nil || t.GroupSize != 0 {
			return nil, formatErr("tensor %s: float tensor with scales, biases or a group size", t.Name)
		}
		return out, nil
	}
	if t.GroupSize != limits.QuantGroupSize {
		return nil, formatErr("tensor %s: group size %d, only %d is supported", t.Name, t.GroupSize, limits.QuantGroupSize)
	}
	for _, r := range []*Range{t.Scales, t.Biases} {
		if r == nil || r.Length != s {
			return nil, formatErr("tensor %s: scales and biases must each be %d bytes of BF16", t.Name, s)
		}
		out = append(out, *r)
	}
	return out, nil
}

func (e Encoding) check() error {
	switch {
	case e.DType == DTypeF32 && e.Bits == 32,
		(e.DType == DTypeBF16 || e.DType == DTypeF16) && e.Bits == 16,
		e.DType == DTypeU32 && (e.Bits == 4 || e.Bits == 8):
		return nil
	}
	return fmt.Errorf("dtype %q with %d bits is not a known encoding", e.DType, e.Bits)
}

func (m *Manifest) validateExperts(sizes map[string]int64) error {
	g := &m.Geometry
	if m.Architecture == ArchQwen35 {
		if m.Experts != nil {
			return formatErr("a dense model has no experts section")
		}
		return nil
	}
	x := m.Experts
	if x == nil {
		return formatErr("a MoE model needs an experts section")
	}
	if x.Count != g.NumExperts || x.TopK != g.NumExpertsPerTok {
		return formatErr("experts: count %d / top_k %d disagree with geometry %d / %d", x.Count, x.TopK, g.NumExperts, g.NumExpertsPerTok)
	}
	if x.Stride <= 0 || x.Stride%limits.DirectIOAlign != 0 {
		return formatErr("experts: stride %d is not a positive multiple of %d", x.Stride, limits.DirectIOAlign)
	}
	if err := x.validateParts(g); err != nil {
		return err
	}
	if len(x.Layers) != g.NumLayers {
		return formatErr("experts: %d layer files for %d layers", len(x.Layers), g.NumLayers)
	}
	for i, l := range x.Layers {
		if l.Layer != i || l.File != ExpertFileName(i) {
			return formatErr("experts: entry %d is layer %d file %q, want layer %d file %q", i, l.Layer, l.File, i, ExpertFileName(i))
		}
		if size, ok := sizes[l.File]; !ok || size != int64(x.Count)*x.Stride {
			return formatErr("experts: %s must be listed with size %d experts × %d = %d bytes (found %d)", l.File, x.Count, x.Stride, int64(x.Count)*x.Stride, size)
		}
	}
	return nil
}

func (x *Experts) validateParts(g *Geometry) error {
	if len(x.Parts) != len(ExpertPartNames) {
		return formatErr("experts: %d parts, want gate, up, down", len(x.Parts))
	}
	h, in := int64(g.HiddenSize), int64(g.MoeIntermediateSize)
	want := [3][]int64{{in, h}, {in, h}, {h, in}}
	var ranges []Range
	for i := range x.Parts {
		p := &x.Parts[i]
		if p.Name != ExpertPartNames[i] || p.File != "" || len(p.Shape) != 2 || p.Shape[0] != want[i][0] || p.Shape[1] != want[i][1] {
			return formatErr("experts: part %d is %s %v, want %s %v", i, p.Name, p.Shape, ExpertPartNames[i], want[i])
		}
		r, err := p.ranges()
		if err != nil {
			return err
		}
		for _, rr := range r {
			if rr.Offset < 0 || rr.Offset > x.Stride-rr.Length {
				return formatErr("experts: part %s range [%d, +%d) lies outside the %d-byte stride", p.Name, rr.Offset, rr.Length, x.Stride)
			}
		}
		ranges = append(ranges, r...)
	}
	return checkOverlaps(map[string][]Range{"expert record": ranges})
}

func checkOverlaps(used map[string][]Range) error {
	for file, rs := range used {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
		for i := 1; i < len(rs); i++ {
			if rs[i].Offset < rs[i-1].Offset+rs[i-1].Length {
				return formatErr("%s: ranges at %d and %d overlap", file, rs[i-1].Offset, rs[i].Offset)
			}
		}
	}
	return nil
}

// Validate checks that a geometry is usable for arch.
func (g *Geometry) Validate(arch string) error {
	pos := map[string]int{"vocab_size": g.VocabSize, "hidden_size": g.HiddenSize, "num_hidden_layers": g.NumLayers,
		"num_attention_heads": g.NumAttentionHeads, "num_key_value_heads": g.NumKeyValueHeads, "head_dim": g.HeadDim,
		"linear_conv_kernel_dim": g.LinearConvKernelDim, "linear_num_key_heads": g.LinearNumKeyHeads,
		"linear_num_value_heads": g.LinearNumValueHeads, "linear_key_head_dim": g.LinearKeyHeadDim,
		"linear_value_head_dim": g.LinearValueHeadDim}
	if arch == ArchQwen35MoE || arch == ArchQwen4Exp {
		pos["num_experts"], pos["num_experts_per_tok"] = g.NumExperts, g.NumExpertsPerTok
		pos["moe_intermediate_size"], pos["shared_expert_intermediate_size"] = g.MoeIntermediateSize, g.SharedExpertIntermediateSize
	} else {
		pos["intermediate_size"] = g.IntermediateSize
	}
	for _, k := range sortedKeys(pos) {
		if pos[k] <= 0 {
			return fmt.Errorf("%s must be positive, got %d", k, pos[k])
		}
	}
	if len(g.LayerTypes) != g.NumLayers {
		return fmt.Errorf("layer_types has %d entries for %d layers", len(g.LayerTypes), g.NumLayers)
	}
	for i, lt := range g.LayerTypes {
		if lt != "linear_attention" && lt != "full_attention" {
			return fmt.Errorf("layer_types[%d] is %q", i, lt)
		}
	}
	if g.NumExpertsPerTok > g.NumExperts {
		return fmt.Errorf("num_experts_per_tok %d exceeds num_experts %d", g.NumExpertsPerTok, g.NumExperts)
	}
	if g.NumAttentionHeads%g.NumKeyValueHeads != 0 || g.LinearNumValueHeads%g.LinearNumKeyHeads != 0 {
		return fmt.Errorf("head counts must divide: %d/%d, %d/%d", g.NumAttentionHeads, g.NumKeyValueHeads, g.LinearNumValueHeads, g.LinearNumKeyHeads)
	}
	if (arch == ArchQwen4Exp) != (g.Qwen4Exp != nil) {
		return fmt.Errorf("the qwen4_exp geometry section belongs to, and only to, architecture %s", ArchQwen4Exp)
	}
	if g.Qwen4Exp != nil {
		return g.Qwen4Exp.validate(g)
	}
	return nil
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

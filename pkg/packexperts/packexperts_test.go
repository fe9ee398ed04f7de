package packexperts

import (
	"slices"
	"strings"
	"testing"
)

// The 35B-A3B expert records NVMAI ships: 4-bit 1,769,472 B and 8-bit
// 3,342,336 B, with the part offsets of nvmai-reference.md §2.4.
func TestLayoutExpertsKnownAnswers(t *testing.T) {
	for _, tc := range []struct {
		enc     Encoding
		stride  int64
		offsets []int64 // gate, gate scales, gate biases, up, …, down biases
	}{
		{EncQ4, 1_769_472, []int64{0, 524_288, 557_056, 589_824, 1_114_112, 1_146_880, 1_179_648, 1_703_936, 1_736_704}},
		{EncQ8, 3_342_336, nil},
		{EncBF16, 6_291_456, []int64{0, 2_097_152, 4_194_304}},
	} {
		parts, stride, err := LayoutExperts(2048, 512, tc.enc)
		if err != nil {
			t.Fatal(err)
		}
		if stride != tc.stride {
			t.Errorf("%v: stride %d, want %d", tc.enc, stride, tc.stride)
		}
		var got []int64
		for _, p := range parts {
			got = append(got, p.Offset)
			if p.Scales != nil {
				got = append(got, p.Scales.Offset, p.Biases.Offset)
			}
		}
		if tc.offsets != nil && !slices.Equal(got, tc.offsets) {
			t.Errorf("%v: offsets %v, want %v", tc.enc, got, tc.offsets)
		}
	}
}

// validManifest is a small MoE manifest that passes Validate.
func validManifest(t testing.TB) *Manifest {
	t.Helper()
	g := Geometry{VocabSize: 256, HiddenSize: 128, NumLayers: 1, LayerTypes: []string{"full_attention"}, RMSNormEps: 1e-6,
		HiddenAct: "silu", NumAttentionHeads: 2, NumKeyValueHeads: 1, HeadDim: 64, RopeTheta: 1e7, PartialRotaryFactor: 0.25,
		MaxPositionEmbeddings: 4096, LinearConvKernelDim: 4, LinearNumKeyHeads: 1, LinearNumValueHeads: 2, LinearKeyHeadDim: 64,
		LinearValueHeadDim: 64, NumExperts: 4, NumExpertsPerTok: 2, MoeIntermediateSize: 64, SharedExpertIntermediateSize: 64}
	parts, stride, err := LayoutExperts(128, 64, EncQ4)
	if err != nil {
		t.Fatal(err)
	}
	a := Allocator{File: ResidentFile, Align: ResidentAlign}
	emb := Tensor{Name: "model.embed_tokens.weight", Shape: []int64{256, 128}}
	norm := Tensor{Name: "model.norm.weight", Shape: []int64{128}}
	a.Place(&emb, EncQ8)
	a.Place(&norm, EncF32)
	return &Manifest{Format: FormatName, FormatVersion: FormatVersion, ModelID: "t", Architecture: ArchQwen35MoE, Bits: 4, Geometry: g,
		Tensors: []Tensor{emb, norm},
		Experts: &Experts{Count: 4, TopK: 2, Stride: stride, Parts: parts, Layers: []ExpertLayer{{0, ExpertFileName(0)}}},
		Files:   []Payload{{ResidentFile, a.Size}, {ExpertFileName(0), 4 * stride}, {"tokenizer.json", 10}}}
}

func TestValidateRefusesInconsistentManifests(t *testing.T) {
	if err := validManifest(t).Validate(); err != nil {
		t.Fatalf("valid manifest refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(m *Manifest)
		want   string
	}{
		{"format version", func(m *Manifest) { m.FormatVersion = 2 }, "format_version 2"},
		{"bits 6", func(m *Manifest) { m.Bits = 6 }, "bits 6"},
		{"tensor past end of file", func(m *Manifest) { m.Tensors[1].Offset = 1 << 40 }, "lies outside"},
		{"length mismatch", func(m *Manifest) { m.Tensors[1].Length = 4 }, "needs 512 bytes"},
		{"overlap", func(m *Manifest) { m.Tensors[1].Offset = m.Tensors[0].Offset }, "overlap"},
		{"unknown file", func(m *Manifest) { m.Tensors[0].File = "other.bin" }, "not in the file list"},
		{"escaping path", func(m *Manifest) { m.Files[2].Name = "../tokenizer.json" }, "not a clean path"},
		{"absolute path", func(m *Manifest) { m.Files[2].Name = "/etc/passwd" }, "absolute"},
		{"duplicate tensor", func(m *Manifest) { m.Tensors[1].Name = m.Tensors[0].Name }, "duplicate"},
		{"stride not aligned", func(m *Manifest) { m.Experts.Stride += 512 }, "multiple of 4096"},
		{"expert file size", func(m *Manifest) { m.Files[1].Size-- }, "must be listed with size"},
		{"group size", func(m *Manifest) { m.Tensors[0].GroupSize = 32 }, "group size 32"},
		{"scales missing", func(m *Manifest) { m.Tensors[0].Scales = nil }, "scales and biases"},
		{"geometry", func(m *Manifest) { m.Geometry.LayerTypes = []string{"sliding"} }, "layer_types[0]"},
		{"expert count", func(m *Manifest) { m.Experts.Count = 5 }, "disagree with geometry"},
		{"written_by with a newline", func(m *Manifest) { m.WrittenBy = "nvmai\nforged" }, "written_by"},
		{"written_by too long", func(m *Manifest) { m.WrittenBy = strings.Repeat("v", 300) }, "written_by"},
		{"rope type", func(m *Manifest) { m.Geometry.RopeScaling = yarnForTest(); m.Geometry.RopeScaling.Type = "longrope" }, `rope_scaling.rope_type "longrope"`},
		{"rope factor", func(m *Manifest) { m.Geometry.RopeScaling = yarnForTest(); m.Geometry.RopeScaling.Factor = 1 }, "rope_scaling.factor 1"},
		{"rope original", func(m *Manifest) {
			m.Geometry.RopeScaling = yarnForTest()
			m.Geometry.RopeScaling.OriginalMaxPositionEmbeddings = 8192
		}, "rope_scaling.original_max_position_embeddings 8192"},
		{"rope betas", func(m *Manifest) { m.Geometry.RopeScaling = yarnForTest(); m.Geometry.RopeScaling.BetaSlow = 0 }, "rope_scaling.beta_fast"},
		{"rope attention factor", func(m *Manifest) { m.Geometry.RopeScaling = yarnForTest(); m.Geometry.RopeScaling.AttentionFactor = -1 }, "rope_scaling.attention_factor"},
	} {
		m := validManifest(t)
		tc.mutate(m)
		err := m.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func yarnForTest() *RopeScaling {
	return &RopeScaling{Type: RopeTypeYaRN, Factor: 4, OriginalMaxPositionEmbeddings: 1024, BetaFast: 32, BetaSlow: 1, AttentionFactor: 1.1386, Truncate: true}
}

// rope_scaling is omitted for plain RoPE, so manifests written before it
// existed read as before, and a YaRN install's parameters round-trip.
func TestRopeScalingIsOptional(t *testing.T) {
	for _, rs := range []*RopeScaling{nil, yarnForTest()} {
		m := validManifest(t)
		m.Geometry.RopeScaling = rs
		raw, err := encodeForTest(m)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "rope_scaling") != (rs != nil) {
			t.Errorf("rope_scaling %+v: encoded as %s", rs, raw)
		}
		back, err := ParseManifest(raw)
		if err != nil || (rs == nil) != (back.Geometry.RopeScaling == nil) || (rs != nil && *back.Geometry.RopeScaling != *rs) {
			t.Errorf("rope_scaling %+v: parsed back %+v, %v", rs, back, err)
		}
	}
	if got := yarnForTest().Context(4096); got != 4096 {
		t.Errorf("context %d, want 4 × 1024", got)
	}
	if got := yarnForTest().Context(8192); got != 8192 {
		t.Errorf("context %d, want max_position_embeddings 8192 when larger", got)
	}
}

// written_by (review L11) names the nvmai build; manifests written before
// it existed stay valid.
func TestWrittenByIsOptional(t *testing.T) {
	for _, wb := range []string{"", "devel", "v1.2.3 (abcdef0)", "devel (abcdef0123+dirty)"} {
		m := validManifest(t)
		m.WrittenBy = wb
		raw, err := encodeForTest(m)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "written_by") != (wb != "") {
			t.Errorf("written_by %q: encoded as %s", wb, raw)
		}
		back, err := ParseManifest(raw)
		if err != nil || back.WrittenBy != wb {
			t.Errorf("written_by %q: parsed back %v, %v", wb, back, err)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	raw, err := encodeForTest(validManifest(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	if q4, err := encodeForTest(validQwen4Manifest(f)); err == nil {
		f.Add(q4)
	}
	f.Add([]byte(`{"format":"nvmai-install","format_version":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("ParseManifest accepted a manifest that does not validate: %v", err)
		}
	})
}

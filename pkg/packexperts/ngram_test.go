package packexperts

import (
	"strings"
	"testing"
)

// validQwen4Manifest is validManifest as a qwen4_exp install with one PLE
// layer and its n-gram table.
func validQwen4Manifest(t testing.TB) *Manifest {
	t.Helper()
	m := validManifest(t)
	m.Architecture = ArchQwen4Exp
	m.Geometry.NumLayers, m.Geometry.LayerTypes = 2, []string{"linear_attention", "full_attention"}
	m.Experts.Layers = append(m.Experts.Layers, ExpertLayer{1, ExpertFileName(1)})
	m.Files = append(m.Files, Payload{ExpertFileName(1), m.Files[1].Size})
	m.Geometry.Qwen4Exp = &Qwen4ExpGeometry{HCCount: 4, HCLowRank: 16, OutputGateType: "sigmoid", NormTopKProb: true,
		PLELayers: []int{0}, PLEEmbedDim: 64, PLEConvKernelSize: 4, NGramSize: 3, HeadsPerNGram: 8, NGramVocabSizeBase: 1000,
		NGramVocabSizeDivisibleBy: 128, Seed: 1234, SplitNGramParts: 4, PLEResetTokenID: 3, IndexerNHeads: 8,
		IndexerKVHeads: 1, IndexerHeadDim: 16, IndexerBudget: 8, IndexerCompressRatio: 4}
	tab, err := PlanNGram(&m.Geometry, 0)
	if err != nil {
		t.Fatal(err)
	}
	m.NGram = []NGram{tab}
	m.Files = append(m.Files, Payload{tab.File, tab.FileSize()})
	return m
}

func TestValidateQwen4Manifests(t *testing.T) {
	if err := validQwen4Manifest(t).Validate(); err != nil {
		t.Fatalf("valid qwen4_exp manifest refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(m *Manifest)
		want   string
	}{
		{"multiplier tampered", func(m *Manifest) { m.NGram[0].Multipliers[1]++ }, "multipliers"},
		{"prime tampered", func(m *Manifest) { m.NGram[0].VocabSizes[3] = 1022 }, "vocab_sizes"},
		{"offset tampered", func(m *Manifest) { m.NGram[0].Offsets[5]-- }, "offsets"},
		{"rows", func(m *Manifest) { m.NGram[0].Rows -= 128 }, "rows"},
		{"row layout", func(m *Manifest) { m.NGram[0].RowsPerBlock = 500 }, "row layout"},
		{"quantized table", func(m *Manifest) { m.NGram[0].DType, m.NGram[0].Bits = DTypeU32, 4 }, "only BF16"},
		{"table file size", func(m *Manifest) { m.Files[len(m.Files)-1].Size-- }, "must be listed with size 135168"},
		{"table unlisted", func(m *Manifest) { m.Files = m.Files[:len(m.Files)-1] }, "must be listed with size"},
		{"no table", func(m *Manifest) { m.NGram = nil }, "0 tables for 1 PLE layers"},
		{"table on a qwen3_5_moe install", func(m *Manifest) { m.Architecture, m.Geometry.Qwen4Exp = ArchQwen35MoE, nil }, "only a qwen4_exp install"},
		{"qwen4_exp geometry missing", func(m *Manifest) { m.Geometry.Qwen4Exp = nil }, "qwen4_exp geometry section"},
		{"PLE on attention", func(m *Manifest) { m.Geometry.Qwen4Exp.PLELayers = []int{1} }, "layer 1 is full_attention"},
		{"PLE layer past the model", func(m *Manifest) { m.Geometry.Qwen4Exp.PLELayers = []int{2} }, "ple_layers"},
		{"one stream", func(m *Manifest) { m.Geometry.Qwen4Exp.HCCount = 1 }, "hc_count 1"},
		{"indexer kv heads", func(m *Manifest) { m.Geometry.Qwen4Exp.IndexerKVHeads = 2 }, "indexer_kv_heads 2"},
		{"gate type", func(m *Manifest) { m.Geometry.Qwen4Exp.OutputGateType = "relu" }, "output_gate_type"},
		{"reset token", func(m *Manifest) { m.Geometry.Qwen4Exp.PLEResetTokenID = 256 }, "outside the vocabulary"},
		{"huge prime base", func(m *Manifest) { m.Geometry.Qwen4Exp.NGramVocabSizeBase = 1 << 40 }, "ngram_vocab_size_base"},
	} {
		m := validQwen4Manifest(t)
		tc.mutate(m)
		err := m.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// Row addresses never cross a 4096-byte page, for the release row (320 B),
// the tiny one (8 B) and one wider than a page.
func TestNGramRowsStayInsidePages(t *testing.T) {
	for _, tc := range []struct {
		width              int
		rowsPerBlock, size int64
	}{{160, 12, 109227192320}, {4, 512, 135168}, {3000, 1, 0}} {
		rows := int64(320001536)
		if tc.width == 4 {
			rows = 16896
		}
		rb, rpb, bb, size, err := NGramLayout(rows, tc.width)
		if err != nil {
			t.Fatal(err)
		}
		if rpb != tc.rowsPerBlock || (tc.size != 0 && size != tc.size) || bb%4096 != 0 {
			t.Errorf("width %d: %d rows per %d-byte block, file %d", tc.width, rpb, bb, size)
		}
		n := &NGram{Rows: rows, RowBytes: rb, RowsPerBlock: rpb, BlockBytes: bb}
		for _, g := range []int64{0, 1, rpb - 1, rpb, 2*rpb + 1, rows - 1} {
			off := n.RowOffset(g)
			if off/4096 != (off+min(rb, 4096)-1)/4096 && rb <= 4096 || off+rb > size {
				t.Errorf("width %d: row %d at %d crosses a page or the end", tc.width, g, off)
			}
		}
	}
}

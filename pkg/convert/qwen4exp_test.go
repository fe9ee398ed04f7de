package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/hf"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/safetensors"
	"github.com/nvmai/nvmai/pkg/verify"
)

const q38Table = "model.language_model.layers.1.ple.ple_embedding.ngram_embedding."

// payloadNames lists an install's weight files: resident, experts, tables.
func payloadNames(m *packexperts.Manifest) []string {
	names := []string{packexperts.ResidentFile}
	for _, l := range m.Experts.Layers {
		names = append(names, l.File)
	}
	for _, t := range m.NGram {
		names = append(names, t.File)
	}
	return names
}

// The two qwen3.8 fixture layouts hold the same weights: every weight file
// of their installs must agree byte for byte, at every width.
func TestQwen38LayoutsGiveIdenticalInstalls(t *testing.T) {
	fused, perExpert := testfix.Dev(t, "tiny-qwen38-fused"), testfix.Dev(t, "tiny-qwen38-perexpert")
	for _, bits := range []int{4, 8, 16} {
		t.Run(fmt.Sprint(bits), func(t *testing.T) {
			a, ma := convertOne(t, fused, bits)
			b, mb := convertOne(t, perExpert, bits)
			if ma.Architecture != packexperts.ArchQwen4Exp || len(ma.NGram) != 1 {
				t.Fatalf("architecture %s, %d n-gram tables", ma.Architecture, len(ma.NGram))
			}
			for _, n := range payloadNames(ma) {
				if !bytes.Equal(readFile(t, filepath.Join(a, n)), readFile(t, filepath.Join(b, n))) {
					t.Errorf("%s differs between the fused and per-expert installs", n)
				}
			}
			if ma.Draft == nil || ma.Draft.Tensors != 10 || mb.Draft != nil {
				t.Errorf("draft heads: fused %+v, per-expert %+v; want the fused fixture's 10 mtp tensors only", ma.Draft, mb.Draft)
			}
			if rep, err := verify.Install(a, 2, false); err != nil || !rep.OK() {
				t.Errorf("verify: %v %+v", err, rep)
			}
		})
	}
}

// At 16 bits the table file holds the checkpoint's shards, concatenated, at
// the documented row addresses, with zero padding.
func TestQwen38TableRowsAreSourceRows(t *testing.T) {
	src := testfix.Dev(t, "tiny-qwen38-fused")
	dir, m := convertOne(t, src, 16)
	tensors := loadTensors(t, src)
	var rows []byte
	for s := 0; s < 4; s++ {
		rows = append(rows, tensors[fmt.Sprintf("%sshard_%d.weight", q38Table, s)].Data...)
	}
	tab := m.NGram[0]
	file := readFile(t, filepath.Join(dir, tab.File))
	if int64(len(file)) != tab.FileSize() || tab.Rows != 16896 || tab.RowsPerBlock != 512 {
		t.Fatalf("table %+v, file %d bytes", tab, len(file))
	}
	for g := int64(0); g < tab.Rows; g++ {
		off := tab.RowOffset(g)
		if !bytes.Equal(file[off:off+tab.RowBytes], rows[g*tab.RowBytes:(g+1)*tab.RowBytes]) {
			t.Fatalf("row %d differs from the checkpoint", g)
		}
	}
	mult := tensors["model.language_model.layers.1.ple.ple_embedding.layer_multipliers"].Data
	for i, v := range tab.Multipliers {
		if got := int64(binary.LittleEndian.Uint64(mult[8*i:])); got != v {
			t.Errorf("multiplier %d: manifest %d, checkpoint %d", i, v, got)
		}
	}
}

// The resident encodings follow docs/qwen38.md.
func TestQwen38ResidentEncodings(t *testing.T) {
	_, m := convertOne(t, testfix.Dev(t, "tiny-qwen38-perexpert"), 4)
	want := map[string]string{
		"model.embed_tokens.weight":                                       "U32/8",
		"lm_head.weight":                                                  "U32/8",
		"model.hyper_connection_mixer.hc_norm.weight":                     "F32/32",
		"model.hyper_connection_mixer.input_mix_weight_down.weight":       "U32/4",
		"model.hyper_connection_mixer.input_mix_weight_up.weight":         "BF16/16", // 16 columns
		"model.layers.0.attn_hyper_connection.block_inject_weight.weight": "BF16/16",
		"model.layers.3.self_attn.indexer.index_qk_proj.weight":           "U32/4",
		"model.layers.3.self_attn.indexer.q_layernorm.weight":             "F32/32",
		"model.layers.1.ple.conv1d.weight":                                "F32/32",
		"model.layers.1.ple.key_proj.weight":                              "U32/4",
		"model.layers.1.ple.norm_query.weight":                            "F32/32",
		"model.layers.0.mlp.gate.weight":                                  "BF16/16",
	}
	got := map[string]string{}
	for _, ts := range m.Tensors {
		got[ts.Name] = fmt.Sprintf("%s/%d", ts.DType, ts.Bits)
		if strings.Contains(ts.Name, "ngram") || strings.HasSuffix(ts.Name, "norm.weight") && strings.HasPrefix(ts.Name, "model.norm") {
			t.Errorf("%s must not be a resident tensor", ts.Name)
		}
	}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%s: %s, want %s", n, got[n], w)
		}
	}
}

// qwen38Variant writes a copy of the per-expert fixture with its tensors
// changed by edit (which may add, drop or rename), into one shard.
func qwen38Variant(t *testing.T, edit func(map[string]safetensors.Tensor)) string {
	t.Helper()
	src := testfix.Dev(t, "tiny-qwen38-perexpert")
	all := loadTensors(t, src)
	edit(all)
	dir := filepath.Join(t.TempDir(), "snap")
	writeSnapshot(t, dir, src, shuffledShards(all, 3, 7))
	return dir
}

func convertErr(t *testing.T, input string) error {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	_, err := Run(context.Background(), Options{Input: input, Targets: []Target{{4, out}}, Threads: 2})
	if err == nil {
		t.Fatal("conversion succeeded")
	}
	if _, statErr := os.Stat(out); statErr == nil {
		t.Errorf("a failed conversion left %s behind", out)
	}
	return err
}

func shardName(s int) string { return fmt.Sprintf("%sshard_%d.weight", q38Table, s) }

// Every way the n-gram shards can disagree with the config is refused,
// naming the tensor.
func TestQwen38NGramShardsRefused(t *testing.T) {
	cases := []struct {
		name string
		edit func(map[string]safetensors.Tensor)
		want string
	}{
		{"gap", func(m map[string]safetensors.Tensor) { delete(m, shardName(2)) }, "shard_2.weight is missing: a gap"},
		{"missing last", func(m map[string]safetensors.Tensor) { delete(m, shardName(3)) }, "shard_3.weight is missing"},
		{"wrong rows", func(m map[string]safetensors.Tensor) {
			s := m[shardName(1)]
			s.Shape, s.Data = []int64{4223, 4}, s.Data[:4223*8]
			m[shardName(1)] = s
		}, "shard_1.weight\": 4223 rows, want 4224"},
		{"wrong shard count", func(m map[string]safetensors.Tensor) {
			s := m[shardName(3)]
			s.Name = shardName(4)
			m[s.Name] = s
		}, "shard 4, but 16896 rows in split_ngram_parts 4 make 4 shards"},
		{"overlap with unsharded", func(m map[string]safetensors.Tensor) {
			s := m[shardName(0)]
			s.Name = q38Table + "weight"
			m[s.Name] = s
		}, "both hold layer 1's n-gram rows"},
		{"no table", func(m map[string]safetensors.Tensor) {
			for s := 0; s < 4; s++ {
				delete(m, shardName(s))
			}
		}, "no n-gram table"},
		{"wrong multipliers", func(m map[string]safetensors.Tensor) {
			n := "model.language_model.layers.1.ple.ple_embedding.layer_multipliers"
			b := m[n]
			b.Data = append([]byte(nil), b.Data...)
			b.Data[0] ^= 2
			m[n] = b
		}, "layer_multipliers\" holds"},
		{"table row width", func(m map[string]safetensors.Tensor) {
			s := m[shardName(0)]
			s.Shape = []int64{2112, 8}
			m[shardName(0)] = s
		}, "want [rows, 4]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := convertErr(t, qwen38Variant(t, tc.edit))
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// One unsharded table is accepted and gives the same install as the shards.
func TestQwen38UnshardedTable(t *testing.T) {
	src := testfix.Dev(t, "tiny-qwen38-perexpert")
	snap := qwen38Variant(t, func(m map[string]safetensors.Tensor) {
		var data []byte
		for s := 0; s < 4; s++ {
			data = append(data, m[shardName(s)].Data...)
			delete(m, shardName(s))
		}
		m[q38Table+"weight"] = safetensors.Tensor{Name: q38Table + "weight", DType: safetensors.BF16, Shape: []int64{16896, 4}, Data: data}
	})
	a, m := convertOne(t, snap, 16)
	b, _ := convertOne(t, src, 16)
	for _, n := range payloadNames(m) {
		if !bytes.Equal(readFile(t, filepath.Join(a, n)), readFile(t, filepath.Join(b, n))) {
			t.Errorf("%s differs", n)
		}
	}
}

// An unknown tensor is refused with its name, never dropped; a duplicate
// expert (both layouts, or both prefixes) is refused too.
func TestQwen38UnknownAndDuplicateRefused(t *testing.T) {
	cases := []struct {
		name string
		edit func(map[string]safetensors.Tensor)
		want string
	}{
		{"unknown", func(m map[string]safetensors.Tensor) {
			n := "model.language_model.layers.2.mlp_hyper_connection.stream_mix.weight"
			m[n] = safetensors.Tensor{Name: n, DType: safetensors.BF16, Shape: []int64{4}, Data: make([]byte, 8)}
		}, "layers.2.mlp_hyper_connection.stream_mix.weight\": not a known tensor name"},
		{"final norm", func(m map[string]safetensors.Tensor) {
			n := "model.language_model.norm.weight"
			m[n] = safetensors.Tensor{Name: n, DType: safetensors.BF16, Shape: []int64{64}, Data: make([]byte, 128)}
		}, "norm.weight\": not a known tensor name of qwen4_exp"},
		{"ple on a second layer", func(m map[string]safetensors.Tensor) {
			n := "model.language_model.layers.2.ple.key_proj.weight"
			m[n] = safetensors.Tensor{Name: n, DType: safetensors.BF16, Shape: []int64{4}, Data: make([]byte, 8)}
		}, "layers.2.ple.key_proj.weight\": not a known tensor name"},
		{"duplicate expert", func(m map[string]safetensors.Tensor) {
			n := "model.language_model.layers.0.mlp.experts.3.up_proj.weight"
			d := m[n]
			d.Name = "model.layers.0.mlp.experts.3.up_proj.weight"
			m[d.Name] = d
		}, "same weight as"},
		{"both expert layouts", func(m map[string]safetensors.Tensor) {
			n := "model.language_model.layers.0.mlp.experts.gate_up_proj"
			m[n] = safetensors.Tensor{Name: n, DType: safetensors.BF16, Shape: []int64{16, 64, 64}, Data: make([]byte, 16*64*64*2)}
		}, "experts mix the fused layout"},
		{"missing hyper-connection", func(m map[string]safetensors.Tensor) {
			delete(m, "model.language_model.layers.5.attn_hyper_connection.block_inject_weight.weight")
		}, "model.layers.5.attn_hyper_connection.block_inject_weight.weight"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := convertErr(t, qwen38Variant(t, tc.edit))
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// A per-expert tensor arriving twice from two shards (the same name can
// only repeat across shards without an index) is refused by the expert
// accumulator, as for qwen3_5_moe.
func TestQwen38AccumulatorRefusesDuplicate(t *testing.T) {
	a := newExpertAccumulator([]int{0}, 16)
	if err := a.file(0, 3, hf.ProjUp, "x"); err != nil {
		t.Fatal(err)
	}
	if err := a.file(0, 3, hf.ProjUp, "x"); err == nil || !strings.Contains(err.Error(), "duplicate expert") {
		t.Fatalf("second filing: %v", err)
	}
}

// A small qwen4_exp synthetic install round-trips: it verifies, its
// config.json reads back as its manifest geometry, and its table is the
// planned sparse file.
func TestSynthQwen38RoundTrips(t *testing.T) {
	for _, bits := range []int{4, 8, 16} {
		t.Run(fmt.Sprint(bits), func(t *testing.T) {
			dir := synthOne(t, SynthOptions{Geometry: "tiny-qwen38", Bits: bits, Seed: 5})
			if rep, err := verify.Install(dir, 2, false); err != nil || !rep.OK() {
				t.Fatalf("verify: %v %+v", err, rep)
			}
			m, _, err := packexperts.ReadManifest(dir)
			if err != nil {
				t.Fatal(err)
			}
			snap := readFile(t, filepath.Join(dir, "config.json"))
			arch, g, err := hf.ParseConfig(snap, "config.json")
			if err != nil || arch != packexperts.ArchQwen4Exp || g.Qwen4Exp.PLEResetTokenID != synthEndOfText {
				t.Fatalf("config.json: %s %v %+v", arch, err, g.Qwen4Exp)
			}
			if len(m.NGram) != 1 || m.NGram[0].Rows != 16896 {
				t.Fatalf("ngram %+v", m.NGram)
			}
			// The Qwen3.8 test template rides along (pkg/chattemplate's
			// copy, byte for byte).
			if got, want := readFile(t, filepath.Join(dir, "chat_template.jinja")), readFile(t, filepath.Join("..", "chattemplate", "testdata", "models", "qwen38", "chat_template.jinja")); !bytes.Equal(got, want) {
				t.Error("chat_template.jinja is not pkg/chattemplate's Qwen3.8 test template")
			}
			tab := readFile(t, filepath.Join(dir, m.NGram[0].File))
			if int64(len(tab)) != m.NGram[0].FileSize() || !bytes.Equal(tab, make([]byte, len(tab))) {
				t.Errorf("the synthetic table is %d bytes, not %d zeros", len(tab), m.NGram[0].FileSize())
			}
		})
	}
}

// The released geometry plans to the sizes of q38 §6, and --layers keeps
// the PLE layer while it exists.
func TestSynthQwen38FlashPlan(t *testing.T) {
	m, err := PlanSynth(SynthOptions{Geometry: "qwen3.8-flash-next-125b-a6b", Bits: 4})
	if err != nil {
		t.Fatal(err)
	}
	if m.Experts.Stride != 2764800 || len(m.Experts.Layers) != 48 || m.NGram[0].Rows != 320001536 || m.NGram[0].RowWidth != 160 {
		t.Errorf("stride %d, %d expert layers, table %+v", m.Experts.Stride, len(m.Experts.Layers), m.NGram[0])
	}
	if m.NGram[0].FileSize() != 109227192320 {
		t.Errorf("table file %d bytes, want 109227192320 (docs/qwen38.md)", m.NGram[0].FileSize())
	}
	var weights int64
	for _, ts := range m.Tensors {
		weights += elems(ts.Shape)
	}
	if weights != 4947698560 { // q38 §6 "total resident"
		t.Errorf("%d resident weights, want 4,947,698,560", weights)
	}
	one, err := PlanSynth(SynthOptions{Geometry: "qwen3.8-flash-next-125b-a6b", Bits: 8, Layers: 1})
	if err != nil || len(one.NGram) != 0 || len(one.Geometry.Qwen4Exp.PLELayers) != 0 {
		t.Errorf("--layers 1: %v, %d tables", err, len(one.NGram))
	}
}

// The receipt covers the n-gram table: one flipped bit in it fails
// nvmai-verify, naming the file.
func TestQwen38VerifyCatchesTableCorruption(t *testing.T) {
	dir, m := convertOne(t, testfix.Dev(t, "tiny-qwen38-fused"), 8)
	p := filepath.Join(dir, m.NGram[0].File)
	b := readFile(t, p)
	b[m.NGram[0].RowOffset(777)] ^= 1
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Install(dir, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || !strings.Contains(fmt.Sprint(rep.Problems), m.NGram[0].File) {
		t.Fatalf("corrupted table passed verification: %+v", rep)
	}
}

// --bits 4,8 writes from one read exactly what two single-width runs write.
func TestQwen38OneReadManyWidths(t *testing.T) {
	src := testfix.Dev(t, "tiny-qwen38-perexpert")
	base := filepath.Join(t.TempDir(), "q38")
	targets := Targets(base, []int{4, 8})
	if _, err := Run(context.Background(), Options{Input: src, Targets: targets, Threads: 2}); err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		single, m := convertOne(t, src, tg.Bits)
		for _, n := range payloadNames(m) {
			if !bytes.Equal(readFile(t, filepath.Join(single, n)), readFile(t, filepath.Join(tg.Dir, n))) {
				t.Errorf("%d-bit %s differs between one read for two widths and a single run", tg.Bits, n)
			}
		}
	}
}

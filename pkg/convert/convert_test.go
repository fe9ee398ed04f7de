package convert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/quant"
	"github.com/nvmai/nvmai/pkg/receipt"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

func convertOne(t *testing.T, input string, bits int) (string, *packexperts.Manifest) {
	t.Helper()
	out := filepath.Join(t.TempDir(), fmt.Sprintf("install-%d", bits))
	res, err := Run(context.Background(), Options{Input: input, Targets: []Target{{bits, out}}, Threads: 2})
	if err != nil {
		t.Fatalf("convert %s at %d bits: %v", input, bits, err)
	}
	if len(res) != 1 || res[0].Dir != out {
		t.Fatalf("results %+v", res)
	}
	m, _, err := packexperts.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	return out, m
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The two fixture layouts hold the same weights, so their installs must
// agree byte for byte in every expert file and in the resident file.
func TestFusedAndPerExpertLayoutsAgree(t *testing.T) {
	fused, perExpert := testfix.Dev(t, "tiny-moe-fused"), testfix.Dev(t, "tiny-moe-perexpert")
	for _, bits := range []int{4, 16} {
		t.Run(fmt.Sprint(bits), func(t *testing.T) {
			a, ma := convertOne(t, fused, bits)
			b, _ := convertOne(t, perExpert, bits)
			names := []string{packexperts.ResidentFile}
			for _, l := range ma.Experts.Layers {
				names = append(names, l.File)
			}
			for _, n := range names {
				if !bytes.Equal(readFile(t, filepath.Join(a, n)), readFile(t, filepath.Join(b, n))) {
					t.Errorf("%s differs between the fused and per-expert installs", n)
				}
			}
		})
	}
}

// At 16 bits every packed expert is the source tensors, bit for bit.
func TestSixteenBitExpertsAreSourceBits(t *testing.T) {
	src := testfix.Dev(t, "tiny-moe-perexpert")
	dir, m := convertOne(t, src, 16)
	checkExpertsEqualSource(t, dir, m, loadTensors(t, src))
}

func checkExpertsEqualSource(t *testing.T, dir string, m *packexperts.Manifest, src map[string]safetensors.Tensor) {
	t.Helper()
	x := m.Experts
	for _, l := range x.Layers {
		file := readFile(t, filepath.Join(dir, l.File))
		for e := 0; e < x.Count; e++ {
			for _, p := range x.Parts {
				name := fmt.Sprintf("model.language_model.layers.%d.mlp.experts.%d.%s_proj.weight", l.Layer, e, p.Name)
				want := src[name].Data
				off := int64(e)*x.Stride + p.Offset
				if got := file[off : off+p.Length]; !bytes.Equal(got, want) {
					t.Fatalf("layer %d expert %d %s: packed bytes differ from %s", l.Layer, e, p.Name, name)
				}
			}
		}
	}
}

// TestExpertOrderProbe is the lint gate (scripts/lint.sh): experts arrive in
// a shuffled order spread over shards and must each land at their own index.
// An accumulator that appends in arrival order fails it.
func TestExpertOrderProbe(t *testing.T) {
	src := testfix.Dev(t, "tiny-moe-perexpert")
	all := loadTensors(t, src)
	for _, seed := range []uint64{1, 2, 3} {
		snap := filepath.Join(t.TempDir(), "snap")
		writeSnapshot(t, snap, src, shuffledShards(all, 5, seed))
		dir, m := convertOne(t, snap, 16)
		checkExpertsEqualSource(t, dir, m, all)
	}
}

// A quantized expert dequantizes to within 1.5 quantization steps of the
// source: half a step of rounding, plus up to one step of clipping at the far
// end of the group, because MLX rescales the step so that 0 is exact.
func TestQuantizedExpertsRoundTrip(t *testing.T) {
	src := testfix.Dev(t, "tiny-moe-perexpert")
	all := loadTensors(t, src)
	for _, bits := range []int{4, 8} {
		dir, m := convertOne(t, src, bits)
		x := m.Experts
		file := readFile(t, filepath.Join(dir, x.Layers[2].File))
		e, p := 11, x.Parts[2] // down [H, I]
		rec := file[int64(e)*x.Stride:]
		want := make([]float32, p.Shape[0]*p.Shape[1])
		quant.WidenBF16(want, all[fmt.Sprintf("model.language_model.layers.2.mlp.experts.%d.down_proj.weight", e)].Data)
		cols := int(p.Shape[1])
		row := make([]float32, cols)
		wRow, sRow := int64(cols*bits/8), int64(cols/64*2)
		for r := 0; r < int(p.Shape[0]); r++ {
			w := rec[p.Offset+int64(r)*wRow:][:wRow]
			s := rec[p.Scales.Offset+int64(r)*sRow:][:sRow]
			b := rec[p.Biases.Offset+int64(r)*sRow:][:sRow]
			if err := quant.DequantizeRow(row, w, s, b, bits); err != nil {
				t.Fatal(err)
			}
			for c := range row {
				scale := quant.BF16ToF32(uint16(s[c/64*2]) | uint16(s[c/64*2+1])<<8)
				if diff := abs32(row[c] - want[r*cols+c]); diff > abs32(scale)*1.5+1e-6 {
					t.Fatalf("%d-bit row %d col %d: got %v want %v (scale %v)", bits, r, c, row[c], want[r*cols+c], scale)
				}
			}
		}
	}
}

func abs32(f float32) float32 {
	if f < 0 {
		return -f
	}
	return f
}

// The written install is self-consistent: valid manifest, a receipt that
// re-hashes clean, and per-tensor widths as documented.
func TestInstallIsVerifiable(t *testing.T) {
	dir, m := convertOne(t, testfix.Dev(t, "tiny-moe-fused"), 4)
	rc, err := receipt.Read(filepath.Join(dir, packexperts.ReceiptFile))
	if err != nil {
		t.Fatal(err)
	}
	if probs := receipt.Check(dir, rc, true, 2); len(probs) > 0 {
		t.Fatalf("receipt problems: %v", probs)
	}
	widths := map[string]string{}
	for _, tt := range m.Tensors {
		widths[tt.Name] = fmt.Sprintf("%s/%d", tt.DType, tt.Bits)
	}
	for name, want := range map[string]string{
		"model.embed_tokens.weight":                       "U32/8",
		"lm_head.weight":                                  "U32/8",
		"model.layers.0.linear_attn.in_proj_qkv.weight":   "U32/4",
		"model.layers.0.linear_attn.A_log":                "F32/32",
		"model.layers.0.linear_attn.conv1d.weight":        "F32/32",
		"model.layers.0.mlp.gate.weight":                  "BF16/16",
		"model.layers.3.self_attn.q_norm.weight":          "F32/32",
		"model.layers.3.self_attn.q_proj.weight":          "U32/4",
		"model.layers.3.mlp.shared_expert.up_proj.weight": "U32/4",
		"model.norm.weight":                               "F32/32",
	} {
		if widths[name] != want {
			t.Errorf("%s stored as %s, want %s", name, widths[name], want)
		}
	}
	if m.Draft == nil || m.Draft.Tensors == 0 {
		t.Errorf("mtp tensors were not kept aside in %s", packexperts.DraftFile)
	}
	if len(m.Skipped) == 0 {
		t.Errorf("skipped vision tensors not reported")
	}
}

// --bits 4,8 writes both installs from one read, named OUTPUT-4bit and OUTPUT-8bit,
// identical to converting each width alone.
func TestTwoWidthsFromOneRead(t *testing.T) {
	src := testfix.Dev(t, "tiny-moe-fused")
	out := filepath.Join(t.TempDir(), "m")
	if _, err := Run(context.Background(), Options{Input: src, Targets: Targets(out, []int{4, 8})}); err != nil {
		t.Fatal(err)
	}
	for _, bits := range []int{4, 8} {
		single, _ := convertOne(t, src, bits)
		for _, n := range []string{packexperts.ResidentFile, packexperts.ExpertFileName(5), packexperts.ManifestFile} {
			if !bytes.Equal(readFile(t, filepath.Join(single, n)), readFile(t, filepath.Join(fmt.Sprintf("%s-%dbit", out, bits), n))) {
				t.Errorf("%d-bit %s differs between the two-width and single-width conversions", bits, n)
			}
		}
	}
}

func TestParseBits(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"4", "[4]"}, {"8", "[8]"}, {"16", "[16]"}, {"8,4", "[4 8]"}, {"4, 8", "[4 8]"},
		{"6", "6-bit was withdrawn"}, {"3", "choose 4, 8 or 16"}, {"x", "not a number"}, {"4,4", "twice"},
	} {
		got, err := ParseBits(tc.in)
		s := fmt.Sprint(got)
		if err != nil {
			s = err.Error()
		}
		if !strings.Contains(s, tc.want) {
			t.Errorf("ParseBits(%q) = %s, want %s", tc.in, s, tc.want)
		}
	}
	var be *BitsError
	if _, err := ParseBits("6"); !errors.As(err, &be) {
		t.Errorf("6-bit error is %T, want *BitsError", err)
	}
}

// assertNoLeftovers checks that dir holds nothing but keep (no staging
// directories, no half-written install).
func assertNoLeftovers(t *testing.T, dir string, keep ...string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	allowed := map[string]bool{}
	for _, k := range keep {
		allowed[k] = true
	}
	for _, e := range entries {
		if !allowed[e.Name()] {
			t.Errorf("left behind in %s: %s", dir, e.Name())
		}
	}
}

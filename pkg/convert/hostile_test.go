package convert

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

// copyDir copies a snapshot's regular files (following links) into a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "snap")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func rawSafetensors(header string, data int) []byte {
	out := make([]byte, 8, 8+len(header)+data)
	binary.LittleEndian.PutUint64(out, uint64(len(header)))
	out = append(out, header...)
	return append(out, make([]byte, data)...)
}

// Every hostile input fails with an error naming what is wrong, and leaves
// nothing in the output's parent directory.
func TestHostileInputs(t *testing.T) {
	fused := testfix.Dev(t, "tiny-moe-fused")
	perExpert := testfix.Dev(t, "tiny-moe-perexpert")
	const shard = "model-00002-of-00004.safetensors"
	cases := []struct {
		name   string
		src    string
		mutate func(t *testing.T, dir string)
		want   []string
	}{
		{"truncated shard", fused, func(t *testing.T, dir string) {
			p := filepath.Join(dir, shard)
			fi, _ := os.Stat(p)
			os.Truncate(p, fi.Size()-100)
		}, []string{shard}},
		{"header length past EOF", fused, func(t *testing.T, dir string) {
			b := make([]byte, 16)
			binary.LittleEndian.PutUint64(b, 1<<20)
			os.WriteFile(filepath.Join(dir, shard), b, 0o644)
		}, []string{shard}},
		{"overlapping ranges", fused, func(t *testing.T, dir string) {
			h := `{"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[4,12]}}`
			os.WriteFile(filepath.Join(dir, shard), rawSafetensors(h, 12), 0o644)
		}, []string{shard}},
		{"shape/length mismatch", fused, func(t *testing.T, dir string) {
			h := `{"a":{"dtype":"BF16","shape":[5],"data_offsets":[0,8]}}`
			os.WriteFile(filepath.Join(dir, shard), rawSafetensors(h, 8), 0o644)
		}, []string{shard}},
		{"bad index path", fused, func(t *testing.T, dir string) {
			editIndex(t, dir, func(wm map[string]string) { wm["lm_head.weight"] = "../outside.safetensors" })
		}, []string{"../outside.safetensors"}},
		{"missing expert", perExpert, func(t *testing.T, dir string) {
			removeTensor(t, dir, "model.language_model.layers.2.mlp.experts.5.up_proj.weight")
		}, []string{"experts.5.up_proj"}},
		{"duplicate expert across shards", perExpert, func(t *testing.T, dir string) {
			// The index names expert 3 of layer 0 in one shard; a second
			// shard carries the same expert too.
			name := "model.language_model.layers.0.mlp.experts.3.gate_proj.weight"
			src := loadTensors(t, dir)
			if err := safetensors.WriteFile(filepath.Join(dir, "extra.safetensors"), []safetensors.Tensor{src[name], src["lm_head.weight"]}, nil); err != nil {
				t.Fatal(err)
			}
			editIndex(t, dir, func(wm map[string]string) { wm["lm_head.weight"] = "extra.safetensors" })
		}, []string{"experts.3.gate_proj", "extra.safetensors"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := copyDir(t, tc.src)
			tc.mutate(t, snap)
			parent := t.TempDir()
			_, err := Run(context.Background(), Options{Input: snap, Targets: []Target{{4, filepath.Join(parent, "out")}}})
			if err == nil {
				t.Fatal("conversion succeeded on hostile input")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			assertNoLeftovers(t, parent)
		})
	}
}

func editIndex(t *testing.T, dir string, edit func(map[string]string)) {
	t.Helper()
	p := filepath.Join(dir, "model.safetensors.index.json")
	var idx struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	raw, _ := os.ReadFile(p)
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	edit(idx.WeightMap)
	raw, _ = json.Marshal(idx)
	os.WriteFile(p, raw, 0o644)
}

// removeTensor rewrites the shard holding name without it and drops it from the index.
func removeTensor(t *testing.T, dir, name string) {
	t.Helper()
	var shard string
	editIndex(t, dir, func(wm map[string]string) { shard = wm[name]; delete(wm, name) })
	all := loadTensors(t, dir)
	f, err := safetensors.Open(filepath.Join(dir, shard))
	if err != nil {
		t.Fatal(err)
	}
	var keep []safetensors.Tensor
	for _, ti := range f.Header().Tensors {
		if ti.Name != name {
			keep = append(keep, all[ti.Name])
		}
	}
	f.Close()
	if err := safetensors.WriteFile(filepath.Join(dir, shard), keep, nil); err != nil {
		t.Fatal(err)
	}
}

func TestExpertAccumulator(t *testing.T) {
	a := newExpertAccumulator([]int{0, 1}, 4)
	for _, e := range []int{3, 0, 2, 1} {
		for _, p := range []string{"down", "gate_up"} {
			if err := a.file(0, e, p, "t"); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		layer, e int
		proj     string
		want     string
	}{
		{0, 2, "gate", "duplicate expert: layer 0 expert 2 gate"},
		{1, 4, "gate", "expert 4 is out of range (num_experts is 4)"},
		{1, -1, "up", "out of range"},
		{5, 0, "up", "layer 5 has no routed experts"},
		{1, 0, "sideways", "unknown expert projection"},
	} {
		err := a.file(tc.layer, tc.e, tc.proj, "t")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("file(%d, %d, %s) = %v, want %q", tc.layer, tc.e, tc.proj, err, tc.want)
		}
	}
	a.file(1, 1, "gate", "t")
	err := a.complete()
	if err == nil || !strings.Contains(err.Error(), "layer 1: experts 0(gate+up+down), 1(up+down), 2(gate+up+down)") {
		t.Errorf("complete() = %v", err)
	}
}

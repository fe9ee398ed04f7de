package convert

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/nvmai/nvmai/pkg/safetensors"
)

// loadTensors reads every tensor of a snapshot's shards.
func loadTensors(t testing.TB, dir string) map[string]safetensors.Tensor {
	t.Helper()
	shards, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	out := map[string]safetensors.Tensor{}
	for _, s := range shards {
		f, err := safetensors.Open(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range f.Header().Tensors {
			data := make([]byte, ti.Size())
			if err := f.ReadTensor(ti, data); err != nil {
				t.Fatal(err)
			}
			out[ti.Name] = safetensors.Tensor{Name: ti.Name, DType: ti.DType, Shape: ti.Shape, Data: data}
		}
		f.Close()
	}
	return out
}

// writeSnapshot writes tensors into a new snapshot at dir: shard i gets
// shards[i] in the given order, and the metadata files are copied from meta.
func writeSnapshot(t testing.TB, dir, meta string, shards [][]safetensors.Tensor) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(meta, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	index := map[string]any{"metadata": map[string]any{"total_size": 0}}
	wm := map[string]string{}
	for i, ts := range shards {
		name := filepath.Base(filepath.Join(dir, "shard-"+string(rune('a'+i))+".safetensors"))
		if err := safetensors.WriteFile(filepath.Join(dir, name), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		for _, tt := range ts {
			wm[tt.Name] = name
		}
	}
	index["weight_map"] = wm
	raw, _ := json.MarshalIndent(index, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// shuffledShards deals every tensor into n shards in a random order.
func shuffledShards(all map[string]safetensors.Tensor, n int, seed uint64) [][]safetensors.Tensor {
	names := make([]string, 0, len(all))
	for k := range all {
		names = append(names, k)
	}
	sort.Strings(names)
	r := rand.New(rand.NewPCG(seed, seed))
	r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	shards := make([][]safetensors.Tensor, n)
	for i, k := range names {
		shards[i%n] = append(shards[i%n], all[k])
	}
	return shards
}

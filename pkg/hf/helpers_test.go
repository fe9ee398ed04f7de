package hf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

// fakeTensor is one tensor of a snapshot the tests assemble and then write.
type fakeTensor struct {
	name  string
	shard string
	dtype safetensors.DType
	shape []int64
	data  []byte
}

// fakeSnapshot is a fixture loaded into memory so a test can damage it before
// writing it out.
type fakeSnapshot struct {
	files   map[string][]byte // config.json, tokenizer.json, ...
	tensors []fakeTensor
	// index, when not nil, rewrites the weight map written to the index
	// (tensor name → shard) just before it is written.
	index func(map[string]string)
	// noIndex writes the tensors as a single model.safetensors.
	noIndex bool
	// postWrite, when not nil, damages the written directory.
	postWrite func(dir string)
}

var (
	fixtureCacheMu sync.Mutex
	fixtureCache   = map[string]*fakeSnapshot{}
)

// loadFake reads a fixture snapshot, once per test binary, and returns a
// deep copy the caller may modify.
func loadFake(t testing.TB, name string) *fakeSnapshot {
	t.Helper()
	dir := testfix.Dev(t, name)
	fixtureCacheMu.Lock()
	defer fixtureCacheMu.Unlock()
	fs, ok := fixtureCache[name]
	if !ok {
		fs = &fakeSnapshot{files: map[string][]byte{}}
		for _, f := range []string{ConfigFile, GenerationFile, TokenizerFile, TokenizerConfigFile} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			fs.files[f] = b
		}
		idx, err := os.ReadFile(filepath.Join(dir, IndexFile))
		if err != nil {
			t.Fatal(err)
		}
		var ix struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(idx, &ix); err != nil {
			t.Fatal(err)
		}
		shards := map[string]bool{}
		for _, s := range ix.WeightMap {
			shards[s] = true
		}
		for shard := range shards {
			f, err := safetensors.Open(filepath.Join(dir, shard))
			if err != nil {
				t.Fatal(err)
			}
			for _, ti := range f.Header().Tensors {
				buf := make([]byte, ti.Size())
				if err := f.ReadTensor(ti, buf); err != nil {
					t.Fatal(err)
				}
				fs.tensors = append(fs.tensors, fakeTensor{ti.Name, shard, ti.DType, ti.Shape, buf})
			}
			f.Close()
		}
		sort.Slice(fs.tensors, func(i, j int) bool { return fs.tensors[i].name < fs.tensors[j].name })
		fixtureCache[name] = fs
	}
	cp := &fakeSnapshot{files: map[string][]byte{}}
	for k, v := range fs.files {
		cp.files[k] = v
	}
	cp.tensors = append([]fakeTensor(nil), fs.tensors...)
	return cp
}

// find returns the tensor named name, failing the test if there is none.
func (fs *fakeSnapshot) find(t testing.TB, name string) *fakeTensor {
	t.Helper()
	for i := range fs.tensors {
		if fs.tensors[i].name == name {
			return &fs.tensors[i]
		}
	}
	t.Fatalf("no tensor %q in the fake snapshot", name)
	return nil
}

func (fs *fakeSnapshot) remove(name string) {
	for i := range fs.tensors {
		if fs.tensors[i].name == name {
			fs.tensors = append(fs.tensors[:i], fs.tensors[i+1:]...)
			return
		}
	}
}

// add appends a tensor of zeros in the given shard.
func (fs *fakeSnapshot) add(name, shard string, dtype safetensors.DType, shape ...int64) {
	n := int64(dtype.Size())
	for _, d := range shape {
		n *= d
	}
	fs.tensors = append(fs.tensors, fakeTensor{name, shard, dtype, shape, make([]byte, n)})
}

// editConfig decodes config.json, lets edit change it and encodes it back.
func (fs *fakeSnapshot) editConfig(t testing.TB, edit func(cfg map[string]any)) {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(fs.files[ConfigFile], &cfg); err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fs.files[ConfigFile] = b
}

// write lays the snapshot out in a fresh directory and returns it.
func (fs *fakeSnapshot) write(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range fs.files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	byShard := map[string][]safetensors.Tensor{}
	weightMap := map[string]string{}
	for _, ft := range fs.tensors {
		shard := ft.shard
		if fs.noIndex {
			shard = SingleShardFile
		}
		byShard[shard] = append(byShard[shard], safetensors.Tensor{Name: ft.name, DType: ft.dtype, Shape: ft.shape, Data: ft.data})
		weightMap[ft.name] = shard
	}
	for shard, ts := range byShard {
		p := filepath.Join(dir, filepath.FromSlash(shard))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := safetensors.WriteFile(p, ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	if fs.postWrite != nil {
		defer fs.postWrite(dir)
	}
	if fs.noIndex {
		return dir
	}
	if fs.index != nil {
		fs.index(weightMap)
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 1}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, IndexFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// toFlat turns a vision-language snapshot into the text-only form: the
// text_config fields at the top level and tensors under model. instead of
// model.language_model.
func (fs *fakeSnapshot) toFlat(t testing.TB) {
	t.Helper()
	fs.editConfig(t, func(cfg map[string]any) {
		text := cfg["text_config"].(map[string]any)
		for k := range cfg {
			delete(cfg, k)
		}
		for k, v := range text {
			cfg[k] = v
		}
	})
	for i := range fs.tensors {
		if rest, ok := strings.CutPrefix(fs.tensors[i].name, prefixVL); ok {
			fs.tensors[i].name = "model." + rest
		}
	}
}

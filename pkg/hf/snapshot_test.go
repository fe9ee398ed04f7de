package hf

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

type roleCounts struct{ resident, expert, visual, mtp int }

func countRoles(s *Snapshot) roleCounts {
	var c roleCounts
	for _, t := range s.Tensors {
		switch t.Role {
		case Resident:
			c.resident++
		case Expert:
			c.expert++
		case Visual:
			c.visual++
		case MTP:
			c.mtp++
		}
	}
	return c
}

// The counts come from the fixtures' index files and the layer tables of
// docs/qwen35-architecture.md §2.2 (README: 8 layers, 16 experts; 4 dense layers).
func TestFixtures(t *testing.T) {
	cases := []struct {
		name   string
		arch   string
		fused  bool
		shards int
		counts roleCounts
	}{
		{"tiny-moe-fused", ArchMoE, true, 5, roleCounts{125, 8 * 2, 21, 6}},
		{"tiny-moe-perexpert", ArchMoE, false, 4, roleCounts{125, 8 * 16 * 3, 21, 0}},
		{"tiny-dense", ArchDense, false, 2, roleCounts{55, 0, 21, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Open(testfix.Dev(t, c.name))
			if err != nil {
				t.Fatal(err)
			}
			if s.Architecture != c.arch || s.FusedExperts != c.fused || len(s.Shards) != c.shards {
				t.Errorf("arch %s fused %v shards %v; want %s %v %d", s.Architecture, s.FusedExperts, s.Shards, c.arch, c.fused, c.shards)
			}
			if got := countRoles(s); got != c.counts {
				t.Errorf("role counts %+v, want %+v", got, c.counts)
			}
			for i := 1; i < len(s.Tensors); i++ {
				a, b := s.Tensors[i-1], s.Tensors[i]
				if a.Shard > b.Shard || (a.Shard == b.Shard && a.Info.Begin > b.Info.Begin) {
					t.Fatalf("tensors out of read order at %q, %q", a.Name, b.Name)
				}
			}
			// Source files: 4 JSON files, the index, every shard.
			if got, want := len(s.SourceFiles()), 5+c.shards; got != want {
				t.Errorf("%d source files, want %d: %v", got, want, s.SourceFiles())
			}
		})
	}
}

func TestFixtureGeometry(t *testing.T) {
	s, err := Open(testfix.Dev(t, "tiny-moe-fused"))
	if err != nil {
		t.Fatal(err)
	}
	lin, full := LinearAttention, FullAttention
	// Values from the fixture README and docs/qwen35-architecture.md §1.2.
	want := packexperts.Geometry{
		VocabSize: 4160, HiddenSize: 128, NumLayers: 8,
		LayerTypes: []string{lin, lin, lin, full, lin, lin, lin, full},
		RMSNormEps: 1e-6, HiddenAct: "silu", NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 32,
		RopeTheta: 1e7, PartialRotaryFactor: 0.25, MaxPositionEmbeddings: 4096,
		LinearConvKernelDim: 4, LinearNumKeyHeads: 2, LinearNumValueHeads: 4, LinearKeyHeadDim: 32, LinearValueHeadDim: 32,
		NumExperts: 16, NumExpertsPerTok: 4, MoeIntermediateSize: 64, SharedExpertIntermediateSize: 64,
	}
	if !geometryEqual(s.Geometry, want) {
		t.Errorf("geometry\n got %+v\nwant %+v", s.Geometry, want)
	}
	g := s.Generation
	if g == nil || *g.DoSample != true || *g.Temperature != 0.7 || *g.TopK != 20 || *g.TopP != 0.95 ||
		!slices.Equal(g.EOSTokenIDs, []int{4098, 4096}) || *g.PadTokenID != 4096 || g.BOSTokenID != nil {
		t.Errorf("generation config %+v", g)
	}
	dense, err := Open(testfix.Dev(t, "tiny-dense"))
	if err != nil {
		t.Fatal(err)
	}
	if dg := dense.Geometry; !dg.TieWordEmbeddings || dg.IntermediateSize != 256 || dg.NumExperts != 0 || dg.NumLayers != 4 {
		t.Errorf("dense geometry %+v", dg)
	}
}

func geometryEqual(a, b packexperts.Geometry) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func TestClassifyFixtureNames(t *testing.T) {
	s, err := Open(testfix.Dev(t, "tiny-moe-perexpert"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Class{
		"lm_head.weight": {Role: Resident, Canonical: "lm_head.weight", Layer: -1, Expert: -1},
		"model.language_model.embed_tokens.weight":                      {Role: Resident, Canonical: "model.embed_tokens.weight", Layer: -1, Expert: -1},
		"model.language_model.norm.weight":                              {Role: Resident, Canonical: "model.norm.weight", Layer: -1, Expert: -1},
		"model.language_model.layers.3.self_attn.q_proj.weight":         {Role: Resident, Canonical: "model.layers.3.self_attn.q_proj.weight", Layer: 3, Expert: -1},
		"model.language_model.layers.7.mlp.experts.10.down_proj.weight": {Role: Expert, Canonical: "model.layers.7.mlp.experts.10.down_proj.weight", Layer: 7, Expert: 10, Proj: ProjDown},
		"model.language_model.layers.0.mlp.experts.2.gate_proj.weight":  {Role: Expert, Canonical: "model.layers.0.mlp.experts.2.gate_proj.weight", Layer: 0, Expert: 2, Proj: ProjGate},
		"model.visual.blocks.0.attn.qkv.weight":                         {Role: Visual, Canonical: "model.visual.blocks.0.attn.qkv.weight", Layer: -1, Expert: -1},
	}
	for _, st := range s.Tensors {
		if w, ok := want[st.Name]; ok {
			if st.Class != w {
				t.Errorf("%s: %+v, want %+v", st.Name, st.Class, w)
			}
			delete(want, st.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("tensors not found: %v", want)
	}
	fused, err := Open(testfix.Dev(t, "tiny-moe-fused"))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range fused.Tensors {
		if st.Name == "model.language_model.layers.5.mlp.experts.gate_up_proj" {
			w := Class{Role: Expert, Canonical: "model.layers.5.mlp.experts.gate_up_proj", Layer: 5, Expert: -1, Proj: ProjGateUp, Fused: true}
			if st.Class != w || !slices.Equal(st.Info.Shape, []int64{16, 128, 128}) {
				t.Errorf("%+v %v", st.Class, st.Info.Shape)
			}
		}
		if strings.HasPrefix(st.Name, "mtp.") && (st.Role != MTP || st.Shard != "model-mtp.safetensors") {
			t.Errorf("%s: role %v in %s, want mtp in model-mtp.safetensors", st.Name, st.Role, st.Shard)
		}
	}
}

func TestClassifyErrors(t *testing.T) {
	_, g, err := ParseConfig(loadFake(t, "tiny-moe-perexpert").files[ConfigFile], "config.json")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, want string
		unknown    bool
	}{
		{"model.language_model.layers.8.input_layernorm.weight", "num_hidden_layers is 8", false},
		{"model.language_model.layers.0.mlp.experts.16.up_proj.weight", "num_experts is 16", false},
		{"model.language_model.layers.03.input_layernorm.weight", "not a known", true},
		{"model.language_model.layers.3.linear_attn.A_log", "not a known", true}, // layer 3 is full attention
		{"model.language_model.layers.0.self_attn.q_proj.weight", "not a known", true},
		{"model.language_model.layers.0.mlp.gate_proj.weight", "not a known", true}, // dense MLP in an MoE
		{"model.language_model.layers.0.mlp.experts.1.gate_proj", "not a known", true},
		{"model.language_model.layers.0.mlp.experts.x.gate_proj.weight", "not a known", true},
		{"model.language_model.embed_tokens.bias", "not a known", true},
		{"transformer.h.0.attn.weight", "not a known", true},
		{"model.language_model.layers.-1.input_layernorm.weight", "not a known", true},
	}
	for _, c := range cases {
		_, err := Classify(c.name, ArchMoE, &g)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("Classify(%q) = %v, want an error naming it and containing %q", c.name, err, c.want)
			continue
		}
		if got := errorsIsUnknown(err); got != c.unknown {
			t.Errorf("Classify(%q): errors.Is(ErrUnknownTensor) = %v, want %v", c.name, got, c.unknown)
		}
	}
}

func TestFlatTextConfig(t *testing.T) {
	for _, name := range []string{"tiny-moe-fused", "tiny-dense"} {
		t.Run(name, func(t *testing.T) {
			orig, err := Open(testfix.Dev(t, name))
			if err != nil {
				t.Fatal(err)
			}
			fake := loadFake(t, name)
			fake.toFlat(t)
			s, err := Open(fake.write(t))
			if err != nil {
				t.Fatal(err)
			}
			if s.Architecture != orig.Architecture || !geometryEqual(s.Geometry, orig.Geometry) {
				t.Errorf("flat config gives %s %+v, want %s %+v", s.Architecture, s.Geometry, orig.Architecture, orig.Geometry)
			}
			canon := func(s *Snapshot) []string {
				var out []string
				for _, t := range s.Tensors {
					out = append(out, fmt.Sprintf("%s %v %d %d %s", t.Canonical, t.Role, t.Layer, t.Expert, t.Proj))
				}
				slices.Sort(out)
				return out
			}
			if !slices.Equal(canon(s), canon(orig)) {
				t.Errorf("canonical names differ between the flat and nested forms")
			}
		})
	}
}

func TestSingleFileCheckpoint(t *testing.T) {
	fake := loadFake(t, "tiny-dense")
	fake.noIndex = true
	s, err := Open(fake.write(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Shards, []string{SingleShardFile}) || countRoles(s) != (roleCounts{55, 0, 21, 0}) {
		t.Errorf("shards %v counts %+v", s.Shards, countRoles(s))
	}
}

func TestHostileSnapshots(t *testing.T) {
	const moe = "tiny-moe-perexpert"
	const lay0 = "model.language_model.layers.0."
	setIndex := func(tensor, shard string) func(map[string]string) {
		return func(m map[string]string) { m[tensor] = shard }
	}
	cases := []struct {
		name    string
		fixture string
		damage  func(t *testing.T, f *fakeSnapshot)
		want    []string
	}{
		{"dotdot shard", moe, func(t *testing.T, f *fakeSnapshot) { f.index = setIndex("lm_head.weight", "../x") }, []string{"lm_head.weight", `"../x"`, "plain relative"}},
		{"absolute shard", moe, func(t *testing.T, f *fakeSnapshot) { f.index = setIndex("lm_head.weight", "/etc/passwd") }, []string{`"/etc/passwd" is absolute`}},
		{"escaping shard", moe, func(t *testing.T, f *fakeSnapshot) { f.index = setIndex("lm_head.weight", "a/../../b") }, []string{`"a/../../b"`}},
		{"backslash shard", moe, func(t *testing.T, f *fakeSnapshot) { f.index = setIndex("lm_head.weight", `..\x`) }, []string{"backslash"}},
		{"empty shard", moe, func(t *testing.T, f *fakeSnapshot) { f.index = setIndex("lm_head.weight", "") }, []string{"empty file name"}},
		{"missing shard", moe, func(t *testing.T, f *fakeSnapshot) {
			f.postWrite = func(dir string) { os.Remove(filepath.Join(dir, "model-00003-of-00004.safetensors")) }
		}, []string{"model-00003-of-00004.safetensors", "missing", "incomplete"}},
		{"indexed tensor absent from shard", moe, func(t *testing.T, f *fakeSnapshot) {
			f.index = setIndex("model.language_model.layers.0.ghost.weight", "model-00001-of-00004.safetensors")
		}, []string{"1 tensors named by", "model.language_model.layers.0.ghost.weight"}},
		{"shard tensor absent from index", moe, func(t *testing.T, f *fakeSnapshot) {
			f.index = func(m map[string]string) { delete(m, "lm_head.weight") }
		}, []string{`"lm_head.weight"`, "not in model.safetensors.index.json"}},
		{"tensor in the wrong shard", moe, func(t *testing.T, f *fakeSnapshot) {
			f.index = setIndex("lm_head.weight", "model-00002-of-00004.safetensors")
		}, []string{`"lm_head.weight"`, "places it in model-00002-of-00004.safetensors"}},
		{"unknown names all listed", moe, func(t *testing.T, f *fakeSnapshot) {
			for i := range 25 {
				f.add(fmt.Sprintf("model.language_model.layers.1.typo_%02d.weight", i), "model-00002-of-00004.safetensors", safetensors.BF16, 2)
			}
		}, []string{"25 tensors do not fit", "typo_00", "typo_19", "and 5 more"}},
		{"expert index past num_experts", moe, func(t *testing.T, f *fakeSnapshot) {
			f.add(lay0+"mlp.experts.16.gate_proj.weight", "model-00001-of-00004.safetensors", safetensors.BF16, 64, 128)
		}, []string{"mlp.experts.16.gate_proj.weight", "num_experts is 16"}},
		{"layer past num_hidden_layers", moe, func(t *testing.T, f *fakeSnapshot) {
			f.add("model.language_model.layers.8.input_layernorm.weight", "model-00001-of-00004.safetensors", safetensors.BF16, 128)
		}, []string{"layers.8.input_layernorm.weight", "num_hidden_layers is 8"}},
		{"resident shape mismatch", moe, func(t *testing.T, f *fakeSnapshot) {
			q := f.find(t, "model.language_model.layers.3.self_attn.q_proj.weight")
			q.shape, q.data = []int64{128, 128}, make([]byte, 128*128*2)
		}, []string{"layers.3.self_attn.q_proj.weight", "shape [128 128]", "implies [256 128]"}},
		{"expert shape mismatch", moe, func(t *testing.T, f *fakeSnapshot) {
			e := f.find(t, lay0+"mlp.experts.5.down_proj.weight")
			e.shape = []int64{64, 128} // transposed
		}, []string{"experts.5.down_proj.weight", "shape [64 128]", "implies [128 64]"}},
		{"integer weights", moe, func(t *testing.T, f *fakeSnapshot) {
			f.find(t, "model.language_model.norm.weight").dtype = safetensors.I16
		}, []string{"model.language_model.norm.weight", "dtype I16"}},
		{"missing expert", moe, func(t *testing.T, f *fakeSnapshot) { f.remove(lay0 + "mlp.experts.7.up_proj.weight") },
			[]string{"1 tensors required", "model.layers.0.mlp.experts.7.up_proj.weight"}},
		{"missing lm_head untied", moe, func(t *testing.T, f *fakeSnapshot) { f.remove("lm_head.weight") },
			[]string{"lm_head.weight"}},
		{"mixed expert layouts", moe, func(t *testing.T, f *fakeSnapshot) {
			f.add("model.language_model.layers.1.mlp.experts.down_proj", "model-00001-of-00004.safetensors", safetensors.BF16, 16, 128, 64)
		}, []string{"mix the fused layout"}},
		{"both prefixes", moe, func(t *testing.T, f *fakeSnapshot) {
			f.add("model.norm.weight", "model-00001-of-00004.safetensors", safetensors.BF16, 128)
		}, []string{"both text prefixes"}},
		{"unsupported model_type", moe, func(t *testing.T, f *fakeSnapshot) {
			f.editConfig(t, func(c map[string]any) { c["model_type"] = "llama" })
		}, []string{`model_type "llama" is not supported`, "qwen3_5_moe"}},
		{"missing tokenizer", moe, func(t *testing.T, f *fakeSnapshot) { delete(f.files, TokenizerFile) }, []string{"tokenizer.json"}},
		{"empty tokenizer config", moe, func(t *testing.T, f *fakeSnapshot) { f.files[TokenizerConfigFile] = nil }, []string{"tokenizer_config.json", "empty"}},
		{"bad generation config", moe, func(t *testing.T, f *fakeSnapshot) {
			f.files[GenerationFile] = []byte(`{"eos_token_id": [4098, 99999]}`)
		}, []string{"generation_config.json", "eos_token_id[1] 99999"}},
		{"missing config", moe, func(t *testing.T, f *fakeSnapshot) { delete(f.files, ConfigFile) }, []string{"config.json"}},
		{"tied dense missing embeddings", "tiny-dense", func(t *testing.T, f *fakeSnapshot) {
			f.remove("model.language_model.embed_tokens.weight")
		}, []string{"model.embed_tokens.weight"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := loadFake(t, c.fixture)
			c.damage(t, f)
			_, err := Open(f.write(t))
			if err == nil {
				t.Fatal("Open accepted the damaged snapshot")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// The writer refuses 8-bit floats, so the test rewrites a U8 tensor's dtype
// in the written header.
func TestF8ShardRefused(t *testing.T) {
	f := loadFake(t, "tiny-dense")
	n := f.find(t, "model.language_model.norm.weight")
	n.dtype, n.data = safetensors.U8, n.data[:128]
	dir := f.write(t)
	path := filepath.Join(dir, n.shard)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hlen := binary.LittleEndian.Uint64(b)
	header := strings.Replace(string(b[8:8+hlen]), `"dtype":"U8"`, `"dtype":"F8_E4M3"`, 1)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(append(out, header...), b[8+hlen:]...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir)
	if err == nil || !strings.Contains(err.Error(), "8-bit float tensors are not supported; convert the checkpoint to bf16 first") || !strings.Contains(err.Error(), n.shard) {
		t.Errorf("got %v, want the F8 tensor refused naming the shard", err)
	}
}

// Files the index does not name (stray shards, a consolidated copy) are not
// read, even when they are not valid safetensors.
func TestUnindexedShardIgnored(t *testing.T) {
	f := loadFake(t, "tiny-dense")
	f.postWrite = func(dir string) {
		os.WriteFile(filepath.Join(dir, "model-extra.safetensors"), []byte("not safetensors"), 0o644)
		os.WriteFile(filepath.Join(dir, SingleShardFile), []byte("garbage"), 0o644)
	}
	s, err := Open(f.write(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Shards) != 2 {
		t.Errorf("shards %v, want the 2 indexed ones", s.Shards)
	}
}

func TestNoIndexNoModel(t *testing.T) {
	f := loadFake(t, "tiny-dense")
	dir := f.write(t)
	os.Remove(filepath.Join(dir, IndexFile))
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Errorf("got %v, want an error saying neither weights file exists", err)
	}
}

// The ceiling is checked on the file's size before it is read, so a sparse
// file over the ceiling costs no memory.
func TestIndexOverCeilingRefusedBeforeReading(t *testing.T) {
	dir := loadFake(t, "tiny-dense").write(t)
	f, err := os.Create(filepath.Join(dir, IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(limits.SafetensorsIndex + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = Open(dir)
	if err == nil || !strings.Contains(err.Error(), "ceiling") || !strings.Contains(err.Error(), IndexFile) {
		t.Errorf("got %v, want the index refused for its size", err)
	}
}

// Real indexes reach ~28 MB (hundreds of thousands of per-expert tensors).
func TestLargeIndexAccepted(t *testing.T) {
	b := []byte(`{"metadata":{"total_size":1},"weight_map":{`)
	n := 0
	for len(b) < 28<<20 {
		if n > 0 {
			b = append(b, ',')
		}
		b = append(b, `"model.language_model.layers.`...)
		b = strconv.AppendInt(b, int64(n/768), 10)
		b = append(b, `.mlp.experts.`...)
		b = strconv.AppendInt(b, int64(n%768), 10)
		b = append(b, `.gate_proj.weight":"model-`...)
		b = strconv.AppendInt(b, int64(n%999), 10)
		b = append(b, `-of-00999.safetensors"`...)
		n++
	}
	b = append(b, "}}"...)
	path := filepath.Join(t.TempDir(), IndexFile)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := readBounded(path, limits.SafetensorsIndex)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := ParseIndex(data, path)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.WeightMap) != n || len(idx.Shards) != 999 {
		t.Errorf("%d tensors in %d shards, want %d in 999", len(idx.WeightMap), len(idx.Shards), n)
	}
}

// In the Hugging Face cache every snapshot file is a relative symlink into
// ../../blobs/<hash>.
func TestHFCacheLayout(t *testing.T) {
	src := testfix.Dev(t, "tiny-moe-fused")
	root := t.TempDir()
	snap := filepath.Join(root, "snapshots", "0123abcd")
	for _, d := range []string{filepath.Join(root, "blobs"), snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	wantHash := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		blob := hex.EncodeToString(sum[:])
		wantHash[e.Name()] = blob
		if err := os.WriteFile(filepath.Join(root, "blobs", blob), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(snap)
	if err != nil {
		t.Fatal(err)
	}
	if countRoles(s) != (roleCounts{125, 16, 21, 6}) {
		t.Errorf("counts %+v", countRoles(s))
	}
	files, err := s.HashSourceFiles()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(entries) {
		t.Errorf("%d source files, want %d", len(files), len(entries))
	}
	for _, f := range files {
		if wantHash[f.Name] != f.SHA256 {
			t.Errorf("%s: sha256 %s, want %s", f.Name, f.SHA256, wantHash[f.Name])
		}
	}
	sh, err := s.OpenShard("model-mtp.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	sh.Close()
	if _, err := s.OpenShard("../model-mtp.safetensors"); err == nil {
		t.Error("OpenShard accepted a name that is not a shard")
	}
}

func TestOpenShardDetectsChange(t *testing.T) {
	f := loadFake(t, "tiny-dense")
	dir := f.write(t)
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	shard := s.Shards[0]
	var ts []safetensors.Tensor
	for _, ft := range f.tensors {
		if ft.shard == shard && ft.name != "model.language_model.norm.weight" {
			ts = append(ts, safetensors.Tensor{Name: ft.name, DType: ft.dtype, Shape: ft.shape, Data: ft.data})
		}
	}
	if err := safetensors.WriteFile(filepath.Join(dir, shard), ts, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenShard(shard); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("got %v, want the changed shard refused", err)
	}
}

func errorsIsUnknown(err error) bool { return errors.Is(err, ErrUnknownTensor) }

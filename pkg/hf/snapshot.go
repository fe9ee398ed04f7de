// Package hf reads a Hugging Face snapshot of a Qwen3.5 or Qwen3.5-MoE
// checkpoint: config.json, generation_config.json, the safetensors index and
// shard headers, and the role of every tensor (resident weight, routed expert,
// vision tower, multi-token-prediction head). Open validates all of it against
// docs/qwen35-architecture.md before a converter reads a single weight, so a
// bad download fails in seconds with an error naming the file and tensor.
package hf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/nvmai/nvmai/internal/filehash"
	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

// Files of a snapshot.
const (
	ConfigFile          = "config.json"
	GenerationFile      = "generation_config.json"
	TokenizerFile       = "tokenizer.json"
	TokenizerConfigFile = "tokenizer_config.json"
	IndexFile           = "model.safetensors.index.json"
	SingleShardFile     = "model.safetensors"
)

// maxListedProblems bounds how many tensor problems one error spells out.
const maxListedProblems = 20

// SourceTensor is one tensor of the snapshot with its role.
type SourceTensor struct {
	Name  string                 // as in the checkpoint
	Shard string                 // file holding it, relative to the snapshot
	Info  safetensors.TensorInfo // Begin/End relative to the shard's data region
	Class
}

// SourceFile is a file the snapshot was read from, with its size at Open.
type SourceFile struct {
	Name string // relative to the snapshot directory
	Path string // Dir joined with Name
	Size int64
}

// Snapshot is a validated Hugging Face snapshot.
type Snapshot struct {
	Dir          string
	Architecture string // ArchMoE or ArchDense
	Geometry     packexperts.Geometry
	Generation   *GenerationConfig // nil when generation_config.json is absent
	Tensors      []SourceTensor    // sorted by shard, then offset: reading them in order is sequential
	Shards       []string          // sorted
	FusedExperts bool              // experts use the fused [E, 2I, H] / [E, H, I] layout
	// NGram is qwen4_exp's n-gram table per PLE layer (in ple_layers order),
	// its constants checked against the checkpoint's buffers; NGramFirstRow
	// gives the first table row of each table tensor, by source name.
	NGram         []packexperts.NGram
	NGramFirstRow map[string]int64

	files   []SourceFile
	headers map[string]*safetensors.Header
}

// Open reads and validates the snapshot in dir. Symlinks (the Hugging Face
// cache points every file into ../../blobs/) are followed.
func Open(dir string) (*Snapshot, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s: not a directory; pass the snapshot directory", dir)
	}
	s := &Snapshot{Dir: dir, headers: map[string]*safetensors.Header{}}
	steps := []func() error{s.readConfig, s.readGeneration, s.checkTokenizer, s.readWeights, s.classify, s.checkComplete, s.checkNGram}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	sort.Slice(s.files, func(i, j int) bool { return s.files[i].Name < s.files[j].Name })
	return s, nil
}

func (s *Snapshot) path(name string) string { return filepath.Join(s.Dir, filepath.FromSlash(name)) }

// read reads a whole JSON file of the snapshot and records it as a source file.
func (s *Snapshot) read(name string, limit int64) ([]byte, error) {
	b, err := readBounded(s.path(name), limit)
	if err != nil {
		return nil, err
	}
	s.files = append(s.files, SourceFile{Name: name, Path: s.path(name), Size: int64(len(b))})
	return b, nil
}

func (s *Snapshot) readConfig() error {
	b, err := s.read(ConfigFile, limits.SnapshotJSON)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: no %s; pass the directory of a Hugging Face snapshot (the one holding config.json and the .safetensors files)", s.Dir, ConfigFile)
	}
	if err != nil {
		return err
	}
	s.Architecture, s.Geometry, err = ParseConfig(b, s.path(ConfigFile))
	return err
}

func (s *Snapshot) readGeneration() error {
	b, err := s.read(GenerationFile, limits.SnapshotJSON)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	s.Generation, err = ParseGenerationConfig(b, s.path(GenerationFile), s.Geometry.VocabSize)
	return err
}

func (s *Snapshot) checkTokenizer() error {
	for _, f := range []struct {
		name  string
		limit int64
	}{{TokenizerFile, limits.TokenizerJSON}, {TokenizerConfigFile, limits.SnapshotJSON}} {
		size, err := statBounded(s.path(f.name), f.limit)
		if err != nil {
			return fmt.Errorf("tokenizer: %w", err)
		}
		s.files = append(s.files, SourceFile{Name: f.name, Path: s.path(f.name), Size: size})
	}
	if err := packexperts.CheckTokenizerFiles(s.Dir); err != nil {
		return fmt.Errorf("%w; the snapshot's tokenizer is broken (an incomplete download, or an edit): fetch it again", err)
	}
	return nil
}

// readWeights parses the index (or takes the single model.safetensors), then
// every shard header, and checks that the index and the headers agree tensor
// for tensor.
func (s *Snapshot) readWeights() error {
	weightMap, err := s.readIndex()
	if err != nil {
		return err
	}
	for _, shard := range s.Shards {
		h, size, err := s.readShardHeader(shard)
		if err != nil {
			return err
		}
		s.headers[shard] = h
		s.files = append(s.files, SourceFile{Name: shard, Path: s.path(shard), Size: size})
		for _, t := range h.Tensors {
			if weightMap != nil && weightMap[t.Name] != shard {
				return s.indexMismatch(t.Name, shard, weightMap[t.Name])
			}
			// Shards are sorted and each header is sorted by offset, so
			// s.Tensors comes out in file read order.
			s.Tensors = append(s.Tensors, SourceTensor{Name: t.Name, Shard: shard, Info: t})
		}
	}
	if weightMap != nil && len(s.Tensors) != len(weightMap) {
		return s.missingFromShards(weightMap)
	}
	return nil
}

// readIndex returns the index's weight map, or nil for a single-file checkpoint.
func (s *Snapshot) readIndex() (map[string]string, error) {
	b, err := s.read(IndexFile, limits.SafetensorsIndex)
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(s.path(SingleShardFile)); err != nil {
			return nil, fmt.Errorf("%s: neither %s nor %s found; is this a complete safetensors snapshot?", s.Dir, IndexFile, SingleShardFile)
		}
		s.Shards = []string{SingleShardFile}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	idx, err := ParseIndex(b, s.path(IndexFile))
	if err != nil {
		return nil, err
	}
	s.Shards = idx.Shards
	return idx.WeightMap, nil
}

func (s *Snapshot) readShardHeader(shard string) (*safetensors.Header, int64, error) {
	f, err := safetensors.Open(s.path(shard))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, fmt.Errorf("%s names shard %s, which is missing from %s; the download is incomplete", IndexFile, shard, s.Dir)
		}
		return nil, 0, err
	}
	defer f.Close()
	st, err := os.Stat(s.path(shard))
	if err != nil {
		return nil, 0, err
	}
	return f.Header(), st.Size(), nil
}

func (s *Snapshot) indexMismatch(tensor, shard, indexed string) error {
	if indexed == "" {
		return fmt.Errorf("%s: tensor %q is in shard %s but not in %s; the index and the shards disagree", s.Dir, tensor, shard, IndexFile)
	}
	return fmt.Errorf("%s: tensor %q is in shard %s but %s places it in %s", s.Dir, tensor, shard, IndexFile, indexed)
}

func (s *Snapshot) missingFromShards(weightMap map[string]string) error {
	have := make(map[string]bool, len(s.Tensors))
	for _, t := range s.Tensors {
		have[t.Name] = true
	}
	var missing []string
	for name, shard := range weightMap {
		if !have[name] {
			missing = append(missing, fmt.Sprintf("%s (indexed in %s)", name, shard))
		}
	}
	return listError(fmt.Sprintf("%s: %d tensors named by %s are absent from their shards", s.Dir, len(missing), IndexFile), missing)
}

// classify assigns every tensor its role and checks names, shapes and dtypes,
// collecting every problem into one error so one run shows them all.
func (s *Snapshot) classify() error {
	var problems []string
	canonical := map[string]string{}
	layouts := map[bool]string{}
	for i := range s.Tensors {
		t := &s.Tensors[i]
		c, err := Classify(t.Name, s.Architecture, &s.Geometry)
		t.Class = c
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if c.Role == Visual || c.Role == MTP {
			continue
		}
		if prev, dup := canonical[c.Canonical]; dup {
			problems = append(problems, fmt.Sprintf("tensor %q: same weight as %q (both text prefixes used)", t.Name, prev))
		}
		canonical[c.Canonical] = t.Name
		if c.Role == Expert {
			layouts[c.Fused] = t.Name
		}
		check := checkWeight
		if c.Role == NGramTable || c.Role == NGramBuffer {
			check = checkNGramTensor
		}
		if msg := check(t, &s.Geometry); msg != "" {
			problems = append(problems, msg)
		}
	}
	if len(layouts) == 2 {
		problems = append(problems, fmt.Sprintf("experts mix the fused layout (%q) and the per-expert layout (%q)", layouts[true], layouts[false]))
	}
	s.FusedExperts = layouts[true] != ""
	if len(problems) > 0 {
		return listError(fmt.Sprintf("%s: %d tensors do not fit %s (config.json)", s.Dir, len(problems), s.Architecture), problems)
	}
	return nil
}

// checkWeight returns a description of what is wrong with a resident or
// expert tensor's dtype or shape, or "".
func checkWeight(t *SourceTensor, g *packexperts.Geometry) string {
	switch t.Info.DType {
	case safetensors.BF16, safetensors.F16, safetensors.F32:
	default:
		return fmt.Sprintf("tensor %q: dtype %s; model weights must be BF16, F16 or F32", t.Name, t.Info.DType)
	}
	if want := t.ExpectedShape(g); want != nil && !slices.Equal(want, t.Info.Shape) {
		return fmt.Sprintf("tensor %q: shape %v, config.json implies %v", t.Name, t.Info.Shape, want)
	}
	return ""
}

// checkComplete verifies every tensor the geometry calls for is present.
func (s *Snapshot) checkComplete() error {
	have := map[string]bool{}
	for _, t := range s.Tensors {
		if t.Role == Resident || t.Role == Expert {
			have[t.Canonical] = true
		}
	}
	var missing []string
	need := func(name string) {
		if !have[name] {
			missing = append(missing, name)
		}
	}
	if s.Architecture == ArchQwen4Exp {
		for _, n := range Qwen4ExpResidentNames(&s.Geometry) {
			need(n)
		}
		for l := range s.Geometry.NumLayers {
			for _, n := range s.expertNames(l) {
				need(fmt.Sprintf("model.layers.%d.%s", l, n))
			}
		}
		return missingError(s.Dir, missing)
	}
	need("model.embed_tokens.weight")
	need("model.norm.weight")
	if !s.Geometry.TieWordEmbeddings {
		need(lmHead)
	}
	for l, typ := range s.Geometry.LayerTypes {
		p := fmt.Sprintf("model.layers.%d.", l)
		for _, n := range layerTensorList(s.Architecture, typ) {
			need(p + n)
		}
		if s.Architecture == ArchMoE {
			for _, n := range s.expertNames(l) {
				need(p + n)
			}
		}
	}
	return missingError(s.Dir, missing)
}

func missingError(dir string, missing []string) error {
	if len(missing) > 0 {
		return listError(fmt.Sprintf("%s: %d tensors required by config.json are missing", dir, len(missing)), missing)
	}
	return nil
}

// expertNames lists the expert tensors one layer must have, in the layout the
// snapshot uses.
func (s *Snapshot) expertNames(layer int) []string {
	if s.FusedExperts {
		return []string{"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}
	}
	names := make([]string, 0, 3*s.Geometry.NumExperts)
	for e := range s.Geometry.NumExperts {
		for _, p := range []string{ProjGate, ProjUp, ProjDown} {
			names = append(names, fmt.Sprintf("mlp.experts.%d.%s_proj.weight", e, p))
		}
	}
	return names
}

// listError joins up to maxListedProblems items under a headline.
func listError(headline string, items []string) error {
	sort.Strings(items)
	var b strings.Builder
	b.WriteString(headline)
	for i, it := range items {
		if i == maxListedProblems {
			fmt.Fprintf(&b, "\n  … and %d more", len(items)-maxListedProblems)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(it)
	}
	return errors.New(b.String())
}

// SourceFiles lists every file Open read (configs, tokenizer files, index,
// shards), sorted by name, with its size at Open. Hash them with filehash.SHA256, or
// all at once with HashSourceFiles.
func (s *Snapshot) SourceFiles() []SourceFile { return slices.Clone(s.files) }

// HashSourceFiles hashes every source file, refusing one whose size changed
// since Open.
func (s *Snapshot) HashSourceFiles() ([]packexperts.SourceFile, error) {
	out := make([]packexperts.SourceFile, 0, len(s.files))
	for _, f := range s.files {
		size, sum, err := filehash.SHA256(f.Path)
		if err != nil {
			return nil, err
		}
		if size != f.Size {
			return nil, fmt.Errorf("%s: now %d bytes, was %d when the snapshot was opened; it changed underneath us", f.Path, size, f.Size)
		}
		out = append(out, packexperts.SourceFile{Name: f.Name, Size: size, SHA256: sum})
	}
	return out, nil
}

// OpenShard opens one of the snapshot's shards, refusing it if its header no
// longer matches the one validated at Open.
func (s *Snapshot) OpenShard(name string) (*safetensors.File, error) {
	want, ok := s.headers[name]
	if !ok {
		return nil, fmt.Errorf("%s: %q is not a shard of this snapshot", s.Dir, name)
	}
	f, err := safetensors.Open(s.path(name))
	if err != nil {
		return nil, err
	}
	got := f.Header()
	same := got.DataOffset == want.DataOffset && slices.EqualFunc(got.Tensors, want.Tensors, func(a, b safetensors.TensorInfo) bool {
		return a.Name == b.Name && a.DType == b.DType && a.Begin == b.Begin && a.End == b.End && slices.Equal(a.Shape, b.Shape)
	})
	if !same {
		f.Close()
		return nil, fmt.Errorf("%s: header changed since the snapshot was opened", s.path(name))
	}
	return f, nil
}

package convert

import (
	"context"
	"embed"
	"fmt"
	"github.com/nvmai/nvmai/pkg/units"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmai/nvmai/pkg/hf"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/receipt"
	"github.com/nvmai/nvmai/pkg/version"
)

// synthGenerator versions the mapping from (seed, tensor, block) to bytes:
// bump it whenever a change makes the same seed write different weights, so
// manifests (source.revision) and configs tell the two apart.
const synthGenerator = 1

// synthAssets is the tokenizer every synthetic install carries: a copy of
// the fixtures' tiny Qwen tokenizer (4096 byte-level tokens and 7 specials).
//
//go:embed synthassets/tokenizer.json synthassets/tokenizer_config.json synthassets/qwen38_chat_template.jinja
var synthAssets embed.FS

// synthQwen38Template is the chat_template.jinja of qwen4_exp synthetic
// installs: pkg/chattemplate's Qwen3.8 test template (Qwen3.6's with the
// reasoning_effort and preserve_thinking differences of the shared
// qwen38-architecture.md §7; no real one is available offline), so that
// chat and the server treat them as the Qwen3.8 family. Other geometries
// keep the plain ChatML template of tokenizer_config.json.
const synthQwen38Template = "synthassets/qwen38_chat_template.jinja"

// SynthOptions configures a synthetic install.
type SynthOptions struct {
	Geometry  string // a name of SynthGeometryNames
	Bits      int    // 4, 8 or 16
	Output    string // install directory to create
	Layers    int    // keep only the first Layers decoder layers; 0 keeps all
	Seed      uint64 // same seed, same bytes
	Overwrite bool   // replace an existing install
	Threads   int    // generator threads (default all cores); never changes the bytes
	Tool      string // recorded in the receipt
	// Sparse leaves the routed experts' packed weight codes as file holes
	// (their scales and biases, and everything else, are written as
	// usual): an install bigger than the disk, for speed and memory
	// measurements, not fidelity (docs/synthetic.md, "Sparse installs").
	Sparse bool
	// Progress, when set, is called with payload bytes written so far and
	// the total, possibly from several goroutines at once (calls are
	// serialised).
	Progress func(done, total int64)
}

// SynthResult describes a written synthetic install.
type SynthResult struct {
	Dir      string
	Manifest *packexperts.Manifest
	Bytes    int64 // every file of the install, receipt and manifest aside
	// DiskBytes is what the payload and metadata files take on disk
	// (st_blocks), which holes keep below Bytes.
	DiskBytes int64
	Elapsed   time.Duration // planning to publication, fsyncs included
}

// synthPlan is everything a synthetic install will hold, decided before a
// byte is written.
type synthPlan struct {
	geo    SynthGeometry
	seed   uint64
	sparse bool
	man    *packexperts.Manifest
	meta   []metaFile
	files  []*synthFile // payload files in write order: resident.bin, then experts
}

// PlanSynth returns the manifest a synthetic install would get, with every
// file's size, without writing anything (nvmai-convert synth --dry-run).
func PlanSynth(opt SynthOptions) (*packexperts.Manifest, error) {
	m, _, err := PlanSynthDisk(opt)
	return m, err
}

// PlanSynthDisk is PlanSynth with the bytes the install would take on a
// file system that keeps holes (whole 4 KiB blocks for every written
// range): far below the logical size for a qwen4_exp table or a --sparse
// install.
func PlanSynthDisk(opt SynthOptions) (*packexperts.Manifest, int64, error) {
	if err := opt.check(); err != nil {
		return nil, 0, err
	}
	p, err := newSynthPlan(&opt)
	if err != nil {
		return nil, 0, err
	}
	return p.man, p.diskBytes(true), nil
}

// Synth writes a full-size install of opt.Geometry filled with
// deterministic random weights: no source snapshot is read. The install is
// staged next to opt.Output and renamed into place only once sealed, as
// the converter does.
func Synth(ctx context.Context, opt SynthOptions) (*SynthResult, error) {
	start := time.Now()
	if err := opt.check(); err != nil {
		return nil, err
	}
	if opt.Output == "" {
		return nil, fmt.Errorf("no output: pass --output DIR")
	}
	if err := checkTarget(opt.Output, opt.Overwrite); err != nil {
		return nil, err
	}
	p, err := newSynthPlan(&opt)
	if err != nil {
		return nil, err
	}
	final := filepath.Clean(opt.Output)
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return nil, err
	}
	holes := true
	if p.hasHoles() {
		if err := checkHoles(filepath.Dir(final)); err != nil {
			if opt.Sparse {
				return nil, fmt.Errorf("--sparse: %w; write the install to a file system that keeps holes (ext4, xfs, btrfs, tmpfs), or drop --sparse", err)
			}
			holes = false // the table takes its full size: count it below
		}
	}
	if err := checkFreeSpace(filepath.Dir(final), p.diskBytes(holes)); err != nil {
		return nil, err
	}
	removeStaleStaging(final)
	staging, lock, err := createStaging(final)
	if err != nil {
		return nil, err
	}
	published := false
	defer func() {
		if !published {
			os.RemoveAll(staging)
		}
		lock.Close()
	}()
	if err := p.seal(ctx, staging, &opt); err != nil {
		return nil, fmt.Errorf("%s: %w", final, err)
	}
	if err := publish(staging, final, opt.Overwrite); err != nil {
		return nil, err
	}
	published = true
	return &SynthResult{Dir: final, Manifest: p.man, Bytes: p.totalBytes(), DiskBytes: diskUsage(final, p.man), Elapsed: time.Since(start)}, nil
}

func (o *SynthOptions) check() error {
	if o.Bits != 4 && o.Bits != 8 && o.Bits != 16 {
		return &BitsError{o.Bits}
	}
	geo, err := LookupSynthGeometry(o.Geometry, o.Layers)
	if err != nil {
		return err
	}
	if o.Sparse {
		if !hasExperts(geo.Architecture) {
			return fmt.Errorf("--sparse: %s has no routed experts, so it would change nothing; drop --sparse", o.Geometry)
		}
		if o.Bits == 16 {
			return fmt.Errorf("--sparse --bits 16: bfloat16 experts have no codes to leave as holes (holes would make them all zero); use --bits 4 or 8")
		}
	}
	if o.Threads <= 0 {
		o.Threads = runtime.NumCPU()
	}
	if o.Tool == "" {
		o.Tool = "nvmai-convert synth"
	}
	return nil
}

func newSynthPlan(opt *SynthOptions) (*synthPlan, error) {
	geo, err := LookupSynthGeometry(opt.Geometry, opt.Layers)
	if err != nil {
		return nil, err
	}
	p := &synthPlan{geo: geo, seed: opt.Seed, sparse: opt.Sparse}
	p.man = &packexperts.Manifest{
		Format: packexperts.FormatName, FormatVersion: packexperts.FormatVersion, WrittenBy: version.String(),
		ModelID: "synthetic/" + geo.Name, Architecture: geo.Architecture, Bits: opt.Bits, Geometry: geo.Geometry,
		Source: packexperts.Source{Repo: "synthetic", Revision: synthRevision(opt.Seed, opt.Sparse), Files: []packexperts.SourceFile{}},
	}
	if err := p.planResident(opt.Bits); err != nil {
		return nil, err
	}
	if err := p.planExperts(opt.Bits); err != nil {
		return nil, err
	}
	if err := p.planNGram(); err != nil {
		return nil, err
	}
	if err := p.planMetadata(); err != nil {
		return nil, err
	}
	p.listFiles()
	if err := p.man.Validate(); err != nil {
		return nil, fmt.Errorf("internal error, synth planned an invalid install: %w", err)
	}
	return p, nil
}

// synthRevision records how the weights were made in source.revision: a
// sparse install's expert codes differ from the same seed's full install.
func synthRevision(seed uint64, sparse bool) string {
	r := fmt.Sprintf("generator-%d-seed-%d", synthGenerator, seed)
	if sparse {
		r += "-sparse"
	}
	return r
}

// Per-layer resident tensors (docs/qwen35-architecture.md §2.2), by layer
// kind and architecture. hf.Classify checks every name and gives its shape.
var (
	synthNorms      = []string{"input_layernorm.weight", "post_attention_layernorm.weight"}
	synthLinearAttn = []string{
		"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight", "linear_attn.in_proj_b.weight",
		"linear_attn.in_proj_a.weight", "linear_attn.conv1d.weight", "linear_attn.A_log", "linear_attn.dt_bias",
		"linear_attn.norm.weight", "linear_attn.out_proj.weight",
	}
	synthFullAttn = []string{
		"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
		"self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
	}
	synthDenseMLP = []string{"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}
	synthMoEMLP   = []string{
		"mlp.gate.weight", "mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight",
		"mlp.shared_expert.down_proj.weight", "mlp.shared_expert_gate.weight",
	}
)

// residentSpecs names every resident tensor of the geometry with its shape.
func (p *synthPlan) residentSpecs() ([]residentSpec, error) {
	g := &p.geo.Geometry
	if p.geo.Architecture == packexperts.ArchQwen4Exp {
		return p.specsOf(hf.Qwen4ExpResidentNames(g))
	}
	names := []string{"model.embed_tokens.weight"}
	for l, lt := range g.LayerTypes {
		suffixes := append([]string(nil), synthNorms...)
		if lt == hf.FullAttention {
			suffixes = append(suffixes, synthFullAttn...)
		} else {
			suffixes = append(suffixes, synthLinearAttn...)
		}
		if p.geo.Architecture == packexperts.ArchQwen35MoE {
			suffixes = append(suffixes, synthMoEMLP...)
		} else {
			suffixes = append(suffixes, synthDenseMLP...)
		}
		for _, s := range suffixes {
			names = append(names, "model.layers."+strconv.Itoa(l)+"."+s)
		}
	}
	names = append(names, "model.norm.weight")
	if !g.TieWordEmbeddings {
		names = append(names, "lm_head.weight")
	}
	return p.specsOf(names)
}

// specsOf gives each resident tensor the shape hf.Classify checks it against.
func (p *synthPlan) specsOf(names []string) ([]residentSpec, error) {
	g := &p.geo.Geometry
	specs := make([]residentSpec, len(names))
	for i, n := range names {
		c, err := hf.Classify(n, p.geo.Architecture, g)
		if err != nil || c.Role != hf.Resident {
			return nil, fmt.Errorf("internal error: synth tensor %s is not a resident tensor of %s: %v", n, p.geo.Architecture, err)
		}
		specs[i] = residentSpec{n, c.ExpectedShape(g)}
	}
	return specs, nil
}

func (p *synthPlan) planResident(bits int) error {
	specs, err := p.residentSpecs()
	if err != nil {
		return err
	}
	tensors, size, err := layoutResident(specs, bits)
	if err != nil {
		return err
	}
	p.man.Tensors = tensors
	f := &synthFile{name: packexperts.ResidentFile, size: size}
	for i := range tensors {
		if err := f.addTensor(&tensors[i], 0, tensors[i].Name); err != nil {
			return err
		}
	}
	p.files = append(p.files, f)
	return nil
}

func (p *synthPlan) planExperts(bits int) error {
	g := &p.geo.Geometry
	if !hasExperts(p.geo.Architecture) {
		return nil
	}
	parts, stride, err := packexperts.LayoutExperts(g.HiddenSize, g.MoeIntermediateSize, ExpertEncoding(bits))
	if err != nil {
		return fmt.Errorf("expert layout: %w", err)
	}
	x := &packexperts.Experts{Count: g.NumExperts, TopK: g.NumExpertsPerTok, Stride: stride, Parts: parts}
	for l := 0; l < g.NumLayers; l++ {
		name := packexperts.ExpertFileName(l)
		x.Layers = append(x.Layers, packexperts.ExpertLayer{Layer: l, File: name})
		f := &synthFile{name: name, size: int64(x.Count) * stride, codeHoles: p.sparse}
		for e := 0; e < x.Count; e++ {
			for i := range parts {
				key := fmt.Sprintf("experts.%d.%d.%s", l, e, parts[i].Name)
				if err := f.addTensor(&parts[i], int64(e)*stride, key); err != nil {
					return err
				}
			}
		}
		p.files = append(p.files, f)
	}
	p.man.Experts = x
	return nil
}

// planNGram plans each PLE layer's n-gram table as a sparse file: all
// zero rows, written as a hole (docs/synthetic.md says why and what that
// means for measurements).
func (p *synthPlan) planNGram() error {
	g := &p.geo.Geometry
	if g.Qwen4Exp == nil {
		return nil
	}
	for k := range g.Qwen4Exp.PLELayers {
		t, err := packexperts.PlanNGram(g, k)
		if err != nil {
			return fmt.Errorf("internal error: %w", err)
		}
		p.man.NGram = append(p.man.NGram, t)
		p.files = append(p.files, &synthFile{name: t.File, size: t.FileSize(), sparse: true})
	}
	return nil
}

// planMetadata generates config.json and generation_config.json from the
// geometry and takes the tokenizer from the embedded assets. config.json is
// parsed back with the converter's own reader, so it cannot disagree with
// the manifest geometry.
func (p *synthPlan) planMetadata() error {
	cfg, err := p.geo.configJSON(p.seed, p.sparse)
	if err != nil {
		return err
	}
	arch, g, err := hf.ParseConfig(cfg, "synthetic config.json")
	if err != nil {
		return fmt.Errorf("internal error: %w", err)
	}
	if arch != p.geo.Architecture || !reflect.DeepEqual(g, p.geo.Geometry) {
		return fmt.Errorf("internal error: synthetic config.json reads back as %s %+v, want %s %+v", arch, g, p.geo.Architecture, p.geo.Geometry)
	}
	gen, err := generationConfigJSON()
	if err != nil {
		return err
	}
	p.meta = []metaFile{{"config.json", cfg}, {"generation_config.json", gen}}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := synthAssets.ReadFile("synthassets/" + name)
		if err != nil {
			return err
		}
		p.meta = append(p.meta, metaFile{name, data})
	}
	if p.geo.Architecture == packexperts.ArchQwen4Exp {
		data, err := synthAssets.ReadFile(synthQwen38Template)
		if err != nil {
			return err
		}
		p.meta = append(p.meta, metaFile{"chat_template.jinja", data})
	}
	return nil
}

// listFiles records every payload and metadata file with its size.
func (p *synthPlan) listFiles() {
	p.man.Files = nil
	for _, f := range p.files {
		p.man.Files = append(p.man.Files, packexperts.Payload{Name: f.name, Size: f.size})
	}
	for _, m := range p.meta {
		p.man.Files = append(p.man.Files, packexperts.Payload{Name: m.name, Size: int64(len(m.data))})
	}
	sort.Slice(p.man.Files, func(i, j int) bool { return p.man.Files[i].Name < p.man.Files[j].Name })
}

func (p *synthPlan) totalBytes() int64 {
	var n int64
	for _, f := range p.man.Files {
		n += f.Size
	}
	return n
}

// diskBytes is what the install occupies: with holes, sparse files take
// no blocks and files with code holes only the blocks of their written
// ranges; without, every file its full size.
func (p *synthPlan) diskBytes(holes bool) int64 {
	n := p.totalBytes()
	if !holes {
		return n
	}
	for _, f := range p.files {
		n += f.diskBytes() - f.size
	}
	return n
}

// hasHoles reports whether any file relies on holes to stay small.
func (p *synthPlan) hasHoles() bool {
	for _, f := range p.files {
		if f.sparse || f.codeHoles {
			return true
		}
	}
	return false
}

// diskUsage is the blocks the install's payload and metadata files take
// (st_blocks × 512); 0 where the file system does not say.
func diskUsage(dir string, m *packexperts.Manifest) int64 {
	var n int64
	for _, f := range m.Files {
		var st unix.Stat_t
		if unix.Stat(filepath.Join(dir, filepath.FromSlash(f.Name)), &st) == nil {
			n += st.Blocks * 512
		}
	}
	return n
}

// holeProbeSize is the probe file's logical size; it gets one 4 KiB block
// of data, so a file system that keeps holes gives it a few blocks, one
// that does not all of them.
const holeProbeSize = 8 << 20

// checkHoles is probeHoles, replaced by tests to play a file system
// without holes.
var checkHoles = probeHoles

// probeHoles writes a probe file in dir with a hole and compares its
// st_blocks with its size: it fails when the hole took disk blocks.
func probeHoles(dir string) error {
	f, err := os.CreateTemp(dir, ".nvmai-hole-probe-*")
	if err != nil {
		return fmt.Errorf("probing %s for holes: %w", dir, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := f.Truncate(holeProbeSize); err != nil {
		return fmt.Errorf("probing %s for holes: %w", dir, err)
	}
	if _, err := f.WriteAt(make([]byte, 4096), holeProbeSize/2); err != nil {
		return fmt.Errorf("probing %s for holes: %w", dir, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("probing %s for holes: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("probing %s for holes: %w", dir, err)
	}
	if used := st.Blocks * 512; used >= holeProbeSize/2 {
		return fmt.Errorf("the file system of %s does not keep holes: a probe file of %s with 4 KiB written takes %s on disk", dir, units.Bytes(holeProbeSize), units.Bytes(used))
	}
	return nil
}

// CheckHoles reports whether dir's file system keeps file holes, which a
// --sparse install needs to stay small (nvmai-convert synth --dry-run).
func CheckHoles(dir string) error { return checkHoles(dir) }

// seal writes every file into staging: payloads (hashed as they are
// written), metadata, manifest, and the receipt last.
func (p *synthPlan) seal(ctx context.Context, staging string, opt *SynthOptions) error {
	if p.man.Experts != nil {
		if err := os.Mkdir(filepath.Join(staging, packexperts.ExpertDir), 0o755); err != nil {
			return err
		}
	}
	if p.man.NGram != nil {
		if err := os.Mkdir(filepath.Join(staging, packexperts.NGramDir), 0o755); err != nil {
			return err
		}
	}
	sums, err := writeSynthFiles(ctx, staging, p.files, p.seed, opt.Threads, p.progress(opt.Progress))
	if err != nil {
		return err
	}
	metaNames := make([]string, len(p.meta))
	for i, m := range p.meta {
		if err := writeFileSynced(filepath.Join(staging, m.name), m.data); err != nil {
			return err
		}
		metaNames[i] = m.name
	}
	raw, err := EncodeManifest(p.man)
	if err != nil {
		return err
	}
	if err := writeFileSynced(filepath.Join(staging, packexperts.ManifestFile), raw); err != nil {
		return err
	}
	// Re-reading gigabytes of payload only to hash it again would double
	// the I/O; the payload hashes were taken from the bytes as written.
	rc, err := receipt.Build(staging, packexperts.ManifestFile, metaNames, opt.Tool, opt.Threads)
	if err != nil {
		return err
	}
	for i, f := range p.files {
		rc.Files = append(rc.Files, receipt.File{Name: f.name, Size: f.size, SHA256: sums[i]})
	}
	if err := receipt.Write(filepath.Join(staging, packexperts.ReceiptFile), rc); err != nil {
		return err
	}
	for _, d := range []string{packexperts.ExpertDir, packexperts.NGramDir} {
		if _, err := os.Stat(filepath.Join(staging, d)); err == nil {
			if err := syncDir(filepath.Join(staging, d)); err != nil {
				return err
			}
		}
	}
	return syncDir(staging)
}

// progress adapts opt.Progress to the writers' byte counts.
func (p *synthPlan) progress(report func(done, total int64)) func(n int64) {
	if report == nil {
		return func(int64) {}
	}
	var total int64
	for _, f := range p.files {
		total += f.size
	}
	var done int64
	return func(n int64) {
		done += n
		report(done, total)
	}
}

func writeFileSynced(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// checkFreeSpace refuses to start a write that cannot fit, rather than
// failing gigabytes in.
func checkFreeSpace(dir string, need int64) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil // unknown: let the write itself report a full disk
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if need > free {
		return fmt.Errorf("the install needs %s but %s has only %s free; free some space, choose another --output, or write fewer --layers", units.Bytes(need), dir, units.Bytes(free))
	}
	return nil
}

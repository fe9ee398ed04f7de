package convert

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/nvmai/nvmai/pkg/hf"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/safetensors"
	"github.com/nvmai/nvmai/pkg/version"
)

// output is one install being written into its staging directory.
type output struct {
	target   Target
	staging  string
	man      *packexperts.Manifest
	resident *os.File
	tensors  map[string]*packexperts.Tensor // canonical name → placement
	experts  map[int]*os.File               // layer → packed expert file
	parts    map[string]*packexperts.Tensor // "gate", "up", "down"
	ngram    []*os.File                     // one n-gram table per PLE layer (qwen4_exp)
	draft    *safetensors.Writer
	draftF   *os.File
	lock     *os.File // held on staging while this process writes it
}

func newOutput(snap *hf.Snapshot, opt *Options, t Target, mtp []safetensors.TensorSpec) (*output, error) {
	if err := os.MkdirAll(filepath.Dir(t.Dir), 0o755); err != nil {
		return nil, err
	}
	removeStaleStaging(t.Dir)
	staging, lock, err := createStaging(t.Dir)
	if err != nil {
		return nil, err
	}
	o := &output{target: t, staging: staging, lock: lock, tensors: map[string]*packexperts.Tensor{}, experts: map[int]*os.File{}, parts: map[string]*packexperts.Tensor{}}
	o.man = &packexperts.Manifest{
		Format: packexperts.FormatName, FormatVersion: packexperts.FormatVersion, WrittenBy: version.String(),
		ModelID: opt.ModelID, Architecture: snap.Architecture, Bits: t.Bits, Geometry: snap.Geometry,
		Source: packexperts.Source{Repo: opt.Repo, Revision: opt.Revision},
	}
	if err := o.planResident(snap); err != nil {
		return nil, err
	}
	if err := o.planExperts(snap); err != nil {
		return nil, err
	}
	if err := o.planNGram(snap); err != nil {
		return nil, err
	}
	if err := o.openDraft(mtp); err != nil {
		return nil, err
	}
	return o, nil
}

// planResident assigns every resident tensor its encoding and byte range.
func (o *output) planResident(snap *hf.Snapshot) error {
	var specs []residentSpec
	for i := range snap.Tensors {
		if st := &snap.Tensors[i]; st.Role == hf.Resident {
			specs = append(specs, residentSpec{st.Canonical, st.Info.Shape})
		}
	}
	tensors, size, err := layoutResident(specs, o.target.Bits)
	if err != nil {
		return err
	}
	o.man.Tensors = tensors
	for i := range o.man.Tensors {
		o.tensors[o.man.Tensors[i].Name] = &o.man.Tensors[i]
	}
	f, err := os.Create(filepath.Join(o.staging, packexperts.ResidentFile))
	if err != nil {
		return err
	}
	o.resident = f
	return f.Truncate(size)
}

// residentSpec is one resident tensor to place: canonical name and shape.
type residentSpec struct {
	name  string
	shape []int64
}

// layoutResident puts the tensors in forward-pass order and gives each its
// encoding at install width bits and its range of resident.bin, whose size
// it returns. The converter and synth share it, so both lay out alike.
func layoutResident(specs []residentSpec, bits int) ([]packexperts.Tensor, int64, error) {
	specs = append([]residentSpec(nil), specs...)
	sort.SliceStable(specs, func(i, j int) bool { return residentOrder(specs[i].name) < residentOrder(specs[j].name) })
	alloc := packexperts.Allocator{File: packexperts.ResidentFile, Align: packexperts.ResidentAlign}
	tensors := make([]packexperts.Tensor, len(specs))
	for i, s := range specs {
		t := &tensors[i]
		t.Name, t.Shape = s.name, append([]int64(nil), s.shape...)
		if err := alloc.Place(t, ResidentEncoding(s.name, t.Shape, bits)); err != nil {
			return nil, 0, err
		}
	}
	return tensors, alloc.Size, nil
}

// residentOrder sorts the embedding first, then layers in numeric order,
// then the final norm and the head, so the resident file reads in the order
// a forward pass touches it.
func residentOrder(name string) string {
	switch {
	case name == "model.embed_tokens.weight":
		return "0"
	case strings.HasPrefix(name, "model.layers."):
		rest := strings.TrimPrefix(name, "model.layers.")
		n, tail, _ := strings.Cut(rest, ".")
		l, _ := strconv.Atoi(n)
		return fmt.Sprintf("1%06d%s", l, tail)
	}
	return "2" + name
}

func (o *output) planExperts(snap *hf.Snapshot) error {
	g := &snap.Geometry
	if !hasExperts(snap.Architecture) {
		return nil
	}
	parts, stride, err := packexperts.LayoutExperts(g.HiddenSize, g.MoeIntermediateSize, ExpertEncoding(o.target.Bits))
	if err != nil {
		return fmt.Errorf("expert layout: %w", err)
	}
	x := &packexperts.Experts{Count: g.NumExperts, TopK: g.NumExpertsPerTok, Stride: stride, Parts: parts}
	if err := os.MkdirAll(filepath.Join(o.staging, packexperts.ExpertDir), 0o755); err != nil {
		return err
	}
	for l := 0; l < g.NumLayers; l++ {
		name := packexperts.ExpertFileName(l)
		f, err := os.Create(filepath.Join(o.staging, filepath.FromSlash(name)))
		if err != nil {
			return err
		}
		o.experts[l] = f
		if err := f.Truncate(int64(x.Count) * stride); err != nil {
			return err
		}
		x.Layers = append(x.Layers, packexperts.ExpertLayer{Layer: l, File: name})
	}
	o.man.Experts = x
	for i := range x.Parts {
		o.parts[x.Parts[i].Name] = &x.Parts[i]
	}
	return nil
}

// hasExperts reports whether an architecture has routed experts.
func hasExperts(arch string) bool {
	return arch == packexperts.ArchQwen35MoE || arch == packexperts.ArchQwen4Exp
}

// planNGram creates each PLE layer's table file at its full size (rows not
// yet written read as zeros, as does the block padding).
func (o *output) planNGram(snap *hf.Snapshot) error {
	if len(snap.NGram) == 0 {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(o.staging, packexperts.NGramDir), 0o755); err != nil {
		return err
	}
	o.man.NGram = slices.Clone(snap.NGram)
	for i := range o.man.NGram {
		t := &o.man.NGram[i]
		f, err := os.Create(filepath.Join(o.staging, filepath.FromSlash(t.File)))
		if err != nil {
			return err
		}
		o.ngram = append(o.ngram, f)
		if err := f.Truncate(t.FileSize()); err != nil {
			return err
		}
	}
	return nil
}

// writeNGramRows writes rows (bf16, row_bytes each) starting at global row
// g0. Whole blocks go out in one write with their zero padding; a block the
// range only partly covers gets just its rows, since a neighbouring shard
// writes the rest.
func writeNGramRows(f *os.File, t *packexperts.NGram, g0 int64, rows []byte) error {
	n := int64(len(rows)) / t.RowBytes
	var run []byte
	runOff := int64(-1)
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		_, err := f.WriteAt(run, runOff)
		run = run[:0]
		return err
	}
	pad := make([]byte, t.BlockBytes-t.RowsPerBlock*t.RowBytes)
	for i := int64(0); i < n; {
		g := g0 + i
		take := min(t.RowsPerBlock-g%t.RowsPerBlock, n-i)
		seg, off := rows[i*t.RowBytes:(i+take)*t.RowBytes], t.RowOffset(g)
		i += take
		if take == t.RowsPerBlock {
			if runOff+int64(len(run)) != off {
				if err := flush(); err != nil {
					return err
				}
				runOff = off
			}
			run = append(append(run, seg...), pad...)
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		if _, err := f.WriteAt(seg, off); err != nil {
			return err
		}
	}
	return flush()
}

// openDraft starts the draft-head file that keeps the mtp.* tensors aside,
// verbatim, for a future speculative decoder.
func (o *output) openDraft(mtp []safetensors.TensorSpec) error {
	if len(mtp) == 0 {
		return nil
	}
	p := filepath.Join(o.staging, filepath.FromSlash(packexperts.DraftFile))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	w, err := safetensors.NewWriter(f, mtp, map[string]string{"format": "pt", "nvmai": "mtp draft head, copied verbatim"})
	if err != nil {
		f.Close()
		return err
	}
	o.draft, o.draftF = w, f
	o.man.Draft = &packexperts.Draft{File: packexperts.DraftFile, Tensors: len(mtp)}
	return nil
}

// closeFiles flushes and closes every payload file, syncing them to disk.
func (o *output) closeFiles() error {
	var files []*os.File
	if o.resident != nil {
		files = append(files, o.resident)
	}
	for l := 0; l < len(o.experts); l++ {
		files = append(files, o.experts[l])
	}
	files = append(files, o.ngram...)
	if o.draft != nil {
		if err := o.draft.Close(); err != nil {
			return fmt.Errorf("draft head: %w", err)
		}
		files = append(files, o.draftF)
	}
	var first error
	for _, f := range files {
		if err := f.Sync(); err != nil && first == nil {
			first = err
		}
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	o.resident, o.experts, o.draft, o.draftF, o.ngram = nil, map[int]*os.File{}, nil, nil, nil
	return first
}

func (o *output) abort() {
	o.closeFiles()
	os.RemoveAll(o.staging)
}

// unlock lets other runs know this one no longer writes the staging
// directory (published or removed by now).
func (o *output) unlock() {
	if o.lock != nil {
		o.lock.Close()
		o.lock = nil
	}
}

package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/quant"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/sample"
	"github.com/nvmai/nvmai/pkg/verify"
)

// sparseWideGeometry is a test-only MoE shape whose expert records span
// many 4 KiB blocks (the tiny geometries' records fit in two, so every
// block holds some scales): its codes are 64 KiB runs, its scales and
// biases 4 KiB ones, so code holes show in st_blocks.
func withSparseWideGeometry(t *testing.T) string {
	t.Helper()
	const name = "test-sparse-wide-moe"
	saved := synthGeometries
	t.Cleanup(func() { synthGeometries = saved })
	synthGeometries = append(append([]SynthGeometry(nil), saved...), SynthGeometry{
		Name: name, Architecture: packexperts.ArchQwen35MoE, Source: "sparse_test.go",
		Geometry: tinyText(packexperts.Geometry{
			NumLayers: 4, NumExperts: 64, NumExpertsPerTok: 8, MoeIntermediateSize: 1024, SharedExpertIntermediateSize: 64,
		}),
	})
	return name
}

// holesKept skips the caller when the test directory's file system does
// not keep holes: st_blocks then says nothing about --sparse.
func holesKept(t *testing.T, dir string) bool {
	t.Helper()
	if err := probeHoles(dir); err != nil {
		t.Logf("st_blocks checks skipped: %v", err)
		return false
	}
	return true
}

func blocksOf(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// A --sparse install verifies, keeps every file at its manifest size,
// reads its expert codes as zeros while every scale and bias (and every
// other byte) is the full install's, takes far fewer blocks than its size,
// and runs on the CPU engine with finite logits.
func TestSynthSparseInstalls(t *testing.T) {
	wide := withSparseWideGeometry(t)
	cases := []struct {
		geometry string
		bits     int
		// blocksBelow: the expert files' st_blocks must stay under this
		// fraction of their size (1 where records fit in two blocks, so
		// every block holds some scales).
		blocksBelow float64
	}{
		{"tiny-qwen38", 4, 1},
		{"tiny-qwen38", 8, 1},
		{"tiny-moe", 4, 1},
		{wide, 4, 0.25},
		{wide, 8, 0.25},
	}
	if testfix.Quick(raceEnabled) { // one width per geometry: the 8-bit cases write and read the same way
		cases = []struct {
			geometry    string
			bits        int
			blocksBelow float64
		}{cases[0], cases[2], cases[3]}
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s-%d", tc.geometry, tc.bits), func(t *testing.T) {
			parent := t.TempDir()
			dir := synthOne(t, SynthOptions{Geometry: tc.geometry, Bits: tc.bits, Seed: 7, Sparse: true, Output: filepath.Join(parent, "sparse")})
			full := synthOne(t, SynthOptions{Geometry: tc.geometry, Bits: tc.bits, Seed: 7, Output: filepath.Join(parent, "full")})
			if rep, err := verify.Install(dir, 2, false); err != nil || !rep.OK() {
				t.Fatalf("verify: %v %+v", err, rep)
			}
			m, _, err := packexperts.ReadManifest(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Source.Revision != "generator-1-seed-7-sparse" {
				t.Errorf("source.revision %q: a sparse install must not claim the full install's bytes", m.Source.Revision)
			}
			if cfg := readFile(t, filepath.Join(dir, "config.json")); !bytes.Contains(cfg, []byte(`"sparse": true`)) || !bytes.Contains(cfg, []byte("not for fidelity")) {
				t.Errorf("config.json does not mark the install sparse:\n%s", cfg)
			}
			var logical, expertBytes, expertBlocks int64
			for _, f := range m.Files {
				p := filepath.Join(dir, filepath.FromSlash(f.Name))
				st, err := os.Stat(p)
				if err != nil || st.Size() != f.Size {
					t.Errorf("%s: %v, size %d, manifest says %d", f.Name, err, st.Size(), f.Size)
					continue
				}
				logical += f.Size
				if strings.HasPrefix(f.Name, packexperts.ExpertDir+"/") {
					expertBytes += f.Size
					expertBlocks += blocksOf(t, p)
				}
			}
			if !bytes.Equal(readFile(t, filepath.Join(dir, packexperts.ResidentFile)), readFile(t, filepath.Join(full, packexperts.ResidentFile))) {
				t.Error("resident.bin differs from the full install's: the dense trunk must stay as it is")
			}
			checkSparseExperts(t, dir, full, m, tc.blocksBelow < 1)
			if holesKept(t, parent) {
				_, planned, err := PlanSynthDisk(SynthOptions{Geometry: tc.geometry, Bits: tc.bits, Sparse: true})
				if err != nil {
					t.Fatal(err)
				}
				var used int64
				for _, f := range m.Files {
					used += blocksOf(t, filepath.Join(dir, filepath.FromSlash(f.Name)))
				}
				t.Logf("on disk %d of %d bytes (planned %d); expert files %d of %d", used, logical, planned, expertBlocks, expertBytes)
				if used > planned+int64(len(m.Files))*synthDiskBlock {
					t.Errorf("install takes %d bytes on disk, planned %d", used, planned)
				}
				if float64(expertBlocks) >= tc.blocksBelow*float64(expertBytes) && tc.blocksBelow < 1 {
					t.Errorf("expert files take %d bytes on disk of %d logical: the codes were written, not left as holes", expertBlocks, expertBytes)
				}
				for _, tab := range m.NGram {
					if n := blocksOf(t, filepath.Join(dir, tab.File)); n > tab.FileSize()/8 {
						t.Errorf("%s takes %d bytes on disk of %d: not a hole", tab.File, n, tab.FileSize())
					}
				}
				if used >= logical {
					t.Errorf("install takes %d bytes on disk of %d logical", used, logical)
				}
			}
			checkCPUGenerates(t, dir, []int{1, 2, 3, 4, 5}, 4, math.Inf(1))
		})
	}
}

// checkSparseExperts reads every expert record: codes all zero, scales
// non-zero and equal to the full install's, biases ±scale·σ_code with both
// signs in every part, and every other byte (bfloat16 parts, padding)
// equal to the full install's. Where a part has enough groups for a
// statistic, its weights (each its group's bias) have the full install's
// mean 0 and std 1/√in.
func checkSparseExperts(t *testing.T, dir, full string, m *packexperts.Manifest, stats bool) {
	t.Helper()
	x := m.Experts
	for _, l := range x.Layers {
		got := readFile(t, filepath.Join(dir, l.File))
		want := readFile(t, filepath.Join(full, l.File))
		if int64(len(got)) != int64(x.Count)*x.Stride || len(got) != len(want) {
			t.Fatalf("%s: %d bytes, full install %d, want %d", l.File, len(got), len(want), int64(x.Count)*x.Stride)
		}
		codes := make([]bool, len(got))
		for e := 0; e < x.Count; e++ {
			base := int64(e) * x.Stride
			for i := range x.Parts {
				p := &x.Parts[i]
				if p.DType != packexperts.DTypeU32 {
					continue
				}
				w := got[base+p.Offset:][:p.Length]
				if !bytes.Equal(w, make([]byte, len(w))) {
					t.Fatalf("%s expert %d %s: codes are not all zero", l.File, e, p.Name)
				}
				for k := base + p.Biases.Offset; k < base+p.Biases.Offset+p.Biases.Length; k++ {
					codes[k] = true // compared below, not with the full install
				}
				for k := base + p.Offset; k < base+p.Offset+p.Length; k++ {
					codes[k] = true
				}
				levels := float64(int(1)<<p.Bits - 1)
				codeStd := math.Sqrt(((levels+1)*(levels+1) - 1) / 12)
				sc, bi := got[base+p.Scales.Offset:][:p.Scales.Length], got[base+p.Biases.Offset:][:p.Biases.Length]
				signs := [2]int{}
				for k := 0; k+2 <= len(sc); k += 2 {
					scale := quant.BF16ToF32(binary.LittleEndian.Uint16(sc[k:]))
					bias := quant.BF16ToF32(binary.LittleEndian.Uint16(bi[k:]))
					want := quant.BF16ToF32(quant.F32ToBF16(scale * float32(codeStd)))
					if scale <= 0 || (bias != want && bias != -want) {
						t.Fatalf("%s expert %d %s group %d: scale %v bias %v, want a positive scale and bias ±%v", l.File, e, p.Name, k/2, scale, bias, want)
					}
					if bias < 0 {
						signs[0]++
					} else {
						signs[1]++
					}
				}
				if signs[0] == 0 || signs[1] == 0 {
					t.Errorf("%s expert %d %s: biases %d negative, %d positive: want both signs", l.File, e, p.Name, signs[0], signs[1])
				}
				if stats && e == 0 {
					checkDistribution(t, fmt.Sprintf("%s expert %d %s", l.File, e, p.Name), p, tensorValues(t, got, base, p))
				}
			}
		}
		for k := range got {
			if !codes[k] && got[k] != want[k] {
				t.Fatalf("%s byte %d (not a code) is %#x, the full install's %#x", l.File, k, got[k], want[k])
			}
		}
	}
}

// --sparse refuses, before writing anything, a file system that does not
// keep holes; without --sparse the qwen4_exp table is then counted at its
// full size, and the install is still written.
func TestSynthSparseRefusesFileSystemWithoutHoles(t *testing.T) {
	saved := checkHoles
	t.Cleanup(func() { checkHoles = saved })
	probed := 0
	checkHoles = func(dir string) error {
		probed++
		return fmt.Errorf("the file system of %s does not keep holes: a probe file of 8 MiB with 4 KiB written takes 8 MiB on disk", dir)
	}
	parent := t.TempDir()
	_, err := Synth(context.Background(), SynthOptions{Geometry: "tiny-qwen38", Bits: 4, Sparse: true, Output: filepath.Join(parent, "s"), Threads: 2})
	if err == nil || !strings.Contains(err.Error(), "--sparse") || !strings.Contains(err.Error(), "does not keep holes") || !strings.Contains(err.Error(), parent) {
		t.Fatalf("sparse synth on a file system without holes: %v, want a refusal naming the directory", err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("a refused synth left %v", entries)
	}
	synthOne(t, SynthOptions{Geometry: "tiny-qwen38", Bits: 4, Output: filepath.Join(parent, "full")})
	if probed != 2 {
		t.Errorf("probed %d times, want once a run", probed)
	}
	// A geometry without holes does not probe at all.
	synthOne(t, SynthOptions{Geometry: "tiny-moe", Bits: 4, Output: filepath.Join(parent, "moe")})
	if probed != 2 {
		t.Errorf("a tiny-moe install without --sparse probed for holes")
	}
}

func TestSynthSparseOptionErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x")
	for _, tc := range []struct {
		opt  SynthOptions
		want string
	}{
		{SynthOptions{Geometry: "tiny-qwen38", Bits: 16, Sparse: true, Output: out}, "--sparse --bits 16"},
		{SynthOptions{Geometry: "tiny-dense", Bits: 4, Sparse: true, Output: out}, "tiny-dense has no routed experts"},
	} {
		if _, err := Synth(context.Background(), tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.opt, err, tc.want)
		}
	}
}

// The release geometries plan to a few GiB on disk with --sparse, the
// logical sizes unchanged.
func TestSynthSparsePlanSizes(t *testing.T) {
	for _, tc := range []struct {
		geometry  string
		bits      int
		maxDisk   int64
		wantTotal int64
	}{
		{"qwen3.8-flash-next-125b-a6b", 4, 11 << 30, 180711745476}, // payloads and metadata but config.json
		{"qwen3.8-flash-next-125b-a6b", 8, 13 << 30, 0},
		{"qwen3.5-35b-a3b", 8, 5 << 30, 0},
	} {
		dense, denseDisk, err := PlanSynthDisk(SynthOptions{Geometry: tc.geometry, Bits: tc.bits})
		if err != nil {
			t.Fatal(err)
		}
		m, disk, err := PlanSynthDisk(SynthOptions{Geometry: tc.geometry, Bits: tc.bits, Sparse: true})
		if err != nil {
			t.Fatal(err)
		}
		var total, denseTotal int64
		for i, f := range m.Files {
			if f.Name == "config.json" {
				continue // its note says the install is sparse
			}
			total += f.Size
			denseTotal += dense.Files[i].Size
		}
		if total != denseTotal || (tc.wantTotal != 0 && total != tc.wantTotal) {
			t.Errorf("%s %d-bit: sparse logical size %d, full %d, want %d", tc.geometry, tc.bits, total, denseTotal, tc.wantTotal)
		}
		if disk > tc.maxDisk || disk >= denseDisk {
			t.Errorf("%s %d-bit: sparse install takes %d on disk (full %d), want at most %d", tc.geometry, tc.bits, disk, denseDisk, tc.maxDisk)
		}
	}
}

// Chunks tile a file in order without outgrowing the writers' buffers,
// however far apart its spans are (code holes leave megabytes between
// them; a file may also end in a long run of zeros).
func TestSynthChunksTileSparseFiles(t *testing.T) {
	b := &blob{key: "k", kind: fillScales, bits: 4, param: 1}
	for _, tc := range []struct {
		name  string
		size  int64
		spans []int64 // span offsets, each 4 KiB long
	}{
		{"no spans", 3*synthChunk + 5, nil},
		{"gap after the first", 20 * synthChunk, []int64{0, 9 * synthChunk, 9*synthChunk + 4096}},
		{"long zero tail", 10 * synthChunk, []int64{synthChunk / 2}},
		{"dense", 2 * synthChunk, []int64{0, 4096, 8192}},
	} {
		f := &synthFile{name: tc.name, size: tc.size}
		for _, off := range tc.spans {
			f.spans = append(f.spans, span{off: off, n: 4096, blob: b})
		}
		var at int64
		seen := 0
		for _, c := range f.chunks(0) {
			if c.off != at || c.n <= 0 || c.n > synthChunk+synthBlock {
				t.Fatalf("%s: chunk [%d, +%d) after %d", tc.name, c.off, c.n, at)
			}
			for _, s := range c.spans {
				if s.off < c.off || s.off+int64(s.n) > c.off+int64(c.n) {
					t.Fatalf("%s: span %d outside its chunk [%d, +%d)", tc.name, s.off, c.off, c.n)
				}
			}
			seen += len(c.spans)
			at += int64(c.n)
		}
		if at != tc.size || seen != len(tc.spans) {
			t.Errorf("%s: chunks cover %d of %d bytes and %d of %d spans", tc.name, at, tc.size, seen, len(tc.spans))
		}
	}
}

// routedExperts decodes tokens sampled at temperature 1 from install dir
// with the routing traced, and returns, for the last MoE layer, how many
// distinct experts the decode steps used.
func routedExperts(t *testing.T, dir string, tokens int) int {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "route.txt")
	t.Setenv(runtime.RouteTraceEnv, trace)
	e, err := runtime.Load(dir, runtime.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.NewSession(runtime.SessionOptions{}).Generate(context.Background(), []int{1, 2, 3, 4},
		runtime.GenerateOptions{MaxTokens: tokens, Sampling: sample.Params{Temperature: 1, TopP: 1, Seed: 5}, IgnoreEOS: true})
	e.Close()
	if err != nil {
		t.Fatal(err)
	}
	last, seen := -1, map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(readFile(t, trace))), "\n") {
		f := strings.Fields(line)
		var layer int
		fmt.Sscan(f[1], &layer)
		if layer > last {
			last, seen = layer, map[string]bool{}
		}
		if layer == last {
			for _, id := range f[2:] {
				seen[id] = true
			}
		}
	}
	return len(seen)
}

// Routing follows the input on a sparse install as on the full one: the
// last layer's router spreads sampled tokens over as many experts. With
// the full install's biases (every zero-code weight negative) the experts'
// outputs share one direction and the deeper routers pick the same experts
// for every token (measured at the release geometry, 4 layers: 10 experts
// of 512 over 47 tokens at layers 2 and 3, against ~300 on the full install).
func TestSynthSparseRoutingFollowsInput(t *testing.T) {
	wide := withSparseWideGeometry(t)
	parent := t.TempDir()
	for _, bits := range []int{4, 8} {
		sparse := synthOne(t, SynthOptions{Geometry: wide, Bits: bits, Seed: 9, Sparse: true, Output: filepath.Join(parent, fmt.Sprint("sparse", bits))})
		full := synthOne(t, SynthOptions{Geometry: wide, Bits: bits, Seed: 9, Output: filepath.Join(parent, fmt.Sprint("full", bits))})
		s, f := routedExperts(t, sparse, 24), routedExperts(t, full, 24)
		t.Logf("%d-bit: last layer used %d experts on the sparse install, %d on the full one", bits, s, f)
		if 2*s < f {
			t.Errorf("%d-bit: the sparse install's last layer used %d experts over 24 sampled tokens, the full install's %d: routing collapsed", bits, s, f)
		}
	}
}

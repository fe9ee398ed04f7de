package expertcache

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// repoRoot walks up from the package directory to go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	return testfix.RepoRoot(t)
}

var tinyInstalls struct {
	sync.Mutex
	dirs map[int]string
	root string
}

// tinyInstall converts the tiny-moe-fused fixture once per width and
// returns the install directory and its manifest.
func tinyInstall(t testing.TB, bits int) (string, *packexperts.Manifest) {
	t.Helper()
	src := filepath.Join(repoRoot(t), "..", "shared", "fixtures", "dev", "tiny-moe-fused")
	if _, err := os.Stat(filepath.Join(src, "config.json")); err != nil {
		t.Skipf("fixture %s is absent (%v); the tiny-moe tests need /work/shared/fixtures", src, err)
	}
	tinyInstalls.Lock()
	defer tinyInstalls.Unlock()
	if tinyInstalls.dirs == nil {
		root, err := os.MkdirTemp("", "expertcache-tiny-")
		if err != nil {
			t.Fatal(err)
		}
		tinyInstalls.root, tinyInstalls.dirs = root, map[int]string{}
	}
	dir, ok := tinyInstalls.dirs[bits]
	if !ok {
		dir = filepath.Join(tinyInstalls.root, fmt.Sprintf("tiny-%dbit", bits))
		_, err := convert.Run(context.Background(), convert.Options{Input: src, Targets: []convert.Target{{Bits: bits, Dir: dir}}, Threads: 2})
		if err != nil {
			t.Fatalf("converting %s at %d bits: %v", src, bits, err)
		}
		tinyInstalls.dirs[bits] = dir
	}
	m, _, err := packexperts.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, m
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range []string{tinyInstalls.root, benchInstall.dir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// syntheticInstall writes an install holding only experts (no resident
// tensors): layers files of experts records with pseudo-random bytes, and a
// manifest that passes Validate. hidden and inter set the record size.
func syntheticInstall(t testing.TB, dir string, layers, experts, topK, hidden, inter int) *packexperts.Manifest {
	t.Helper()
	parts, stride, err := packexperts.LayoutExperts(hidden, inter, packexperts.EncQ4)
	if err != nil {
		t.Fatal(err)
	}
	types := make([]string, layers)
	for i := range types {
		types[i] = "linear_attention"
	}
	m := &packexperts.Manifest{
		Format: packexperts.FormatName, FormatVersion: packexperts.FormatVersion, ModelID: "synthetic",
		Architecture: packexperts.ArchQwen35MoE, Bits: 4,
		Geometry: packexperts.Geometry{VocabSize: 64, HiddenSize: hidden, NumLayers: layers, LayerTypes: types,
			RMSNormEps: 1e-6, HiddenAct: "silu", NumAttentionHeads: 2, NumKeyValueHeads: 1, HeadDim: 32,
			RopeTheta: 1e6, PartialRotaryFactor: 0.25, MaxPositionEmbeddings: 64, LinearConvKernelDim: 4,
			LinearNumKeyHeads: 1, LinearNumValueHeads: 1, LinearKeyHeadDim: 32, LinearValueHeadDim: 32,
			NumExperts: experts, NumExpertsPerTok: topK, MoeIntermediateSize: inter, SharedExpertIntermediateSize: inter},
		Source:  packexperts.Source{Files: []packexperts.SourceFile{}},
		Tensors: []packexperts.Tensor{},
		Experts: &packexperts.Experts{Count: experts, TopK: topK, Stride: stride, Parts: parts},
	}
	if err := os.MkdirAll(filepath.Join(dir, packexperts.ExpertDir), 0o755); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(layers), uint64(experts)))
	rec := make([]byte, stride)
	for l := range layers {
		name := packexperts.ExpertFileName(l)
		m.Experts.Layers = append(m.Experts.Layers, packexperts.ExpertLayer{Layer: l, File: name})
		m.Files = append(m.Files, packexperts.Payload{Name: name, Size: int64(experts) * stride})
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for range experts {
			for i := 0; i < len(rec); i += 8 {
				v := rng.Uint64()
				for j := 0; j < 8; j++ {
					rec[i+j] = byte(v >> (8 * j))
				}
			}
			if _, err := f.Write(rec); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("synthetic manifest: %v", err)
	}
	return m
}

// expertFiles reads every layer file of an install into memory.
func expertFiles(t testing.TB, dir string, m *packexperts.Manifest) [][]byte {
	t.Helper()
	var out [][]byte
	for _, l := range m.Experts.Layers {
		b, err := os.ReadFile(filepath.Join(dir, l.File))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// checkMats compares the three matrices served for (layer, e) with the
// bytes of the expert record in the file, part by part.
func checkMats(t testing.TB, files [][]byte, m *packexperts.Manifest, layer, e int, got model.ExpertMats) {
	t.Helper()
	x := m.Experts
	rec := files[layer][int64(e)*x.Stride : int64(e+1)*x.Stride]
	for i, mat := range []*kernels.Matrix{got.Gate, got.Up, got.Down} {
		p := &x.Parts[i]
		want := [][]byte{rec[p.Offset : p.Offset+p.Length]}
		have := [][]byte{mat.Data}
		if p.Scales != nil {
			want = append(want, rec[p.Scales.Offset:p.Scales.Offset+p.Scales.Length], rec[p.Biases.Offset:p.Biases.Offset+p.Biases.Length])
			have = append(have, mat.Scales, mat.Biases)
		}
		for j := range want {
			if !bytes.Equal(want[j], have[j]) {
				t.Fatalf("layer %d expert %d part %s blob %d: served bytes differ from the file at offset %d", layer, e, p.Name, j, int64(e)*x.Stride+p.Offset)
			}
		}
		if mat.Rows != int(p.Shape[0]) || mat.Cols != int(p.Shape[1]) {
			t.Fatalf("layer %d expert %d part %s: shape %dx%d, want %v", layer, e, p.Name, mat.Rows, mat.Cols, p.Shape)
		}
	}
}

// dropFromPageCache syncs and evicts every expert file of an install from
// the page cache, so residency measured afterwards comes from our reads.
func dropFromPageCache(t testing.TB, dir string, m *packexperts.Manifest) {
	t.Helper()
	for _, l := range m.Experts.Layers {
		f, err := os.Open(filepath.Join(dir, l.File))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

// cachedBytes is how many bytes of the install's expert files sit in the
// page cache, from mincore over a temporary mapping of each file.
func cachedBytes(t testing.TB, dir string, m *packexperts.Manifest) int64 {
	t.Helper()
	page := int64(os.Getpagesize())
	var total int64
	for _, l := range m.Experts.Layers {
		f, err := os.Open(filepath.Join(dir, l.File))
		if err != nil {
			t.Fatal(err)
		}
		size := int64(m.Experts.Count) * m.Experts.Stride
		data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		vec := make([]byte, (size+page-1)/page)
		_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&data[0])), uintptr(size), uintptr(unsafe.Pointer(&vec[0])))
		unix.Munmap(data)
		if errno != 0 {
			t.Fatalf("mincore %s: %v", l.File, errno)
		}
		for _, v := range vec {
			total += int64(v&1) * page
		}
	}
	return total
}

// Routing traces for the hit-rate simulations. Each returns positions×layers
// requests of topK distinct experts, position-major.

// zipfTrace draws each token's experts from a Zipf(s) popularity over a
// per-layer random ranking of the experts.
func zipfTrace(seed uint64, positions, layers, experts, topK int, s float64) [][]int {
	rng := rand.New(rand.NewPCG(seed, 1))
	ranks := make([][]int, layers)
	for l := range ranks {
		ranks[l] = rng.Perm(experts)
	}
	weights := zipfWeights(experts, s)
	trace := make([][]int, 0, positions*layers)
	for range positions {
		for l := range layers {
			trace = append(trace, drawDistinct(rng, weights, ranks[l], topK, nil))
		}
	}
	return trace
}

// uniformTrace routes every token to topK experts chosen uniformly: what a
// random-weight model's router does, and the worst case for any cache.
func uniformTrace(seed uint64, positions, layers, experts, topK int) [][]int {
	rng := rand.New(rand.NewPCG(seed, 2))
	trace := make([][]int, 0, positions*layers)
	for range positions * layers {
		trace = append(trace, rng.Perm(experts)[:topK])
	}
	return trace
}

// driftTrace is a Zipf trace whose popularity ranking changes every
// topicLen tokens (a topic shift), and where each token keeps reuse of the
// previous token's experts in that layer (NVMAI measured 3.01 of 8 shared
// with the previous token on a real 35B trace).
func driftTrace(seed uint64, positions, layers, experts, topK int, s float64, topicLen int, reuse float64) [][]int {
	rng := rand.New(rand.NewPCG(seed, 3))
	weights := zipfWeights(experts, s)
	ranks := make([][]int, layers)
	prev := make([][]int, layers)
	trace := make([][]int, 0, positions*layers)
	for p := range positions {
		for l := range layers {
			if p%topicLen == 0 {
				ranks[l] = rng.Perm(experts)
			}
			var keep []int
			for _, e := range prev[l] {
				if rng.Float64() < reuse {
					keep = append(keep, e)
				}
			}
			ids := drawDistinct(rng, weights, ranks[l], topK, keep)
			prev[l] = ids
			trace = append(trace, ids)
		}
	}
	return trace
}

func zipfWeights(n int, s float64) []float64 {
	w := make([]float64, n)
	for r := range w {
		w[r] = 1 / math.Pow(float64(r+1), s)
	}
	return w
}

// drawDistinct samples topK distinct experts (starting from keep) with
// probability proportional to weights[rank of the expert].
func drawDistinct(rng *rand.Rand, weights []float64, ranking []int, topK int, keep []int) []int {
	ids := append(make([]int, 0, topK), keep...)
	var total float64
	for _, w := range weights {
		total += w
	}
	for r, e := range ranking {
		if slices.Contains(keep, e) {
			total -= weights[r]
		}
	}
	for len(ids) < topK {
		x := rng.Float64() * total
		for r, e := range ranking {
			if slices.Contains(ids, e) {
				continue
			}
			if x -= weights[r]; x <= 0 {
				ids = append(ids, e)
				total -= weights[r]
				break
			}
		}
	}
	return ids
}

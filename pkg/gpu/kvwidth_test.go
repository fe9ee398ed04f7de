package gpu

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda/cudatest"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// The GPU engine at --kv-bits 8 and 16 (docs/kv-cache.md): the cache
// stored as the CPU engine stores it, so its logits and greedy tokens are
// the CPU engine's at the same width, as closely as at 32 bits.

// kvWidthChunk is the prefill pass these tests load with
// (NVMAI_GPU_CHUNK), so their prompts take several passes.
const kvWidthChunk = "64"

// widthOutputs runs ids through a fresh session of e at bits: the prompt's
// last logits, then n greedy tokens (decode steps after the prefill).
func widthOutputs(t *testing.T, e *runtime.Engine, ids []int, bits, n int) ([]float32, []int) {
	t.Helper()
	s := e.NewSession(runtime.SessionOptions{KVInitial: 16, KVBits: bits})
	defer s.Close()
	var first []float32
	res, err := s.Generate(context.Background(), ids, runtime.GenerateOptions{MaxTokens: n, IgnoreEOS: true, OnLogits: func(r []float32) error {
		if first == nil {
			first = slices.Clone(r)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if gw, ok := e.Model().(*Backend); ok && gw.last != nil && gw.last.KVBits() != bits {
		t.Fatalf("the GPU session's KV cache is %d-bit, asked %d", gw.last.KVBits(), bits)
	}
	return first, res.IDs
}

// greedyAt is n greedy tokens of a fresh session at bits, picked on the
// device (no logits hook).
func greedyAt(t *testing.T, e *runtime.Engine, ids []int, bits, n int) []int {
	t.Helper()
	s := e.NewSession(runtime.SessionOptions{KVInitial: 16, KVBits: bits})
	defer s.Close()
	res, err := s.Generate(context.Background(), ids, runtime.GenerateOptions{MaxTokens: n, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	return res.IDs
}

// compareWidths checks the GPU engine against the CPU engine at 8 and 16
// bits over ids: the prompt's last logits within tol (relative), the
// greedy tokens equal for n steps, with the logits hook and without it
// (the pick on the device). The GPU's logits must also be nearer the CPU
// engine's at the same width than its own at 32 bits: the width is
// honoured, not ignored.
func compareWidths(t *testing.T, name string, cpu, gpu *runtime.Engine, ids []int, n int, tol float64) {
	g32, _ := widthOutputs(t, gpu, ids, model.KVFloat32, 1)
	for _, bits := range []int{model.KVInt8, model.KVBF16} {
		wl, wg := widthOutputs(t, cpu, ids, bits, n)
		gl, gg := widthOutputs(t, gpu, ids, bits, n)
		dev := greedyAt(t, gpu, ids, bits, n)
		rel, from32 := cudatest.RelErr(gl, wl), cudatest.RelErr(gl, g32)
		same := 0
		for same < len(wg) && same < len(gg) && gg[same] == wg[same] {
			same++
		}
		t.Logf("FIDELITY %s %d-bit KV, %d-token prompt: logits rel. error vs the CPU engine %.2e (bitwise equal %v; vs the GPU at 32 bits %.2e); greedy agrees for %d of %d tokens; picked on the device equal %v",
			name, bits, len(ids), rel, bitsEqual(gl, wl), from32, same, n, slices.Equal(dev, wg))
		if same != len(wg) || len(gg) != len(wg) {
			t.Errorf("%s %d-bit KV: greedy differs from token %d: GPU %v, CPU %v", name, bits, same, gg, wg)
		}
		if !slices.Equal(dev, wg) {
			t.Errorf("%s %d-bit KV: greedy picked on the device %v, CPU %v", name, bits, dev, wg)
		}
		if rel > tol {
			t.Errorf("%s %d-bit KV: logits differ from the CPU engine's by %.2e (relative), more than %.0e", name, bits, rel, tol)
		}
		if rel >= from32 {
			t.Errorf("%s %d-bit KV: the logits are no nearer the CPU engine's at %d bits (%.2e) than the GPU's own at 32 (%.2e): the width is not applied", name, bits, bits, rel, from32)
		}
	}
}

// The tiny-moe fixture (4- and 8-bit installs) at --kv-bits 8 and 16: the
// longest refs prompt (960 tokens) in prefill passes of 64 from a 16-token
// cache that grows, then 64 decode steps, against the CPU engine at the
// same width: greedy tokens equal, logits within 1e-4 (relative), as the
// 32-bit cache (TestQuantizedMatchesCPUEngine); and a short probe.
func TestKVWidthMatchesCPUEngine(t *testing.T) {
	needGPU(t)
	t.Setenv("NVMAI_GPU_CHUNK", kvWidthChunk)
	long := longestRef(t, "tiny-moe.refs.json")
	for _, bits := range []int{4, 8} {
		t.Run(fmt.Sprintf("tiny-moe-fused/%d", bits), func(t *testing.T) {
			dir := install(t, "tiny-moe-fused", bits)
			cpu, gpu := loadEngine(t, dir, false), loadEngine(t, dir, true)
			compareWidths(t, fmt.Sprintf("tiny-moe %d-bit", bits), cpu, gpu, long, 64, 1e-4)
			compareWidths(t, fmt.Sprintf("tiny-moe %d-bit", bits), cpu, gpu, cpu.Tokenizer.Encode("The quick brown fox jumps over the lazy"), 64, 1e-4)
		})
	}
}

// A synthetic install (NVMAI_SYNTH_DIRS) at --kv-bits 8 and 16: a
// 150-token prompt in passes of 64, then 64 decode steps, against the CPU
// engine at the same width: greedy equal, logits within 1e-3 (relative),
// as at 32 bits (TestSyntheticMatchesCPUEngine).
func TestKVWidthSyntheticMatchesCPUEngine(t *testing.T) {
	needGPU(t)
	t.Setenv("NVMAI_GPU_CHUNK", kvWidthChunk)
	for _, dir := range envDirs(t, "NVMAI_SYNTH_DIRS", "synthetic install") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			cpu, gpu := loadEngine(t, dir, false), loadEngine(t, dir, true)
			ids := make([]int, 150)
			for i := range ids {
				ids[i] = 100 + (37*i)%5000
			}
			compareWidths(t, filepath.Base(dir), cpu, gpu, ids, 64, 1e-3)
		})
	}
}

// At every width, a chunked prefill (passes of 64 from a 4-token cache
// that grows) equals feeding the prompt token by token (decode graphs):
// the quantized rows written per token are the same bytes, however the
// prompt is cut.
func TestKVWidthChunkedPrefillEqualsSteps(t *testing.T) {
	needGPU(t)
	t.Setenv("NVMAI_GPU_CHUNK", kvWidthChunk)
	e := loadEngine(t, install(t, "tiny-moe-fused", 8), true)
	m := e.Model().(*Backend).Model
	ids := longestRef(t, "tiny-moe.refs.json")[:300]
	for _, bits := range []int{model.KVInt8, model.KVBF16, model.KVFloat32} {
		newState := func() (cudatest.Sequence, error) { return m.NewState(StateOptions{KVInitial: 4, KVBits: bits}) }
		rows := [][]float32{cudatest.LastLogits(t, newState, ids, true, m.geom.V), cudatest.LastLogits(t, newState, ids, false, m.geom.V)}
		if !bitsEqual(rows[0], rows[1]) {
			t.Errorf("%d-bit KV: chunked prefill and single steps differ: max %g", bits, cudatest.MaxAbsDiff(rows[0], rows[1]))
		}
	}
}

// A snapshot at each width (8, 16, 32) restores, into a fresh state whose
// cache must grow and from bytes, and continues with bitwise the same
// logits and greedy tokens; it carries its width (Bytes counts the
// narrower rows) and is refused, with the widths named, by a state of
// another width, in memory and from bytes.
func TestSnapshotKVWidthRoundTrip(t *testing.T) {
	needGPU(t)
	e := loadEngine(t, install(t, "tiny-moe-fused", 4), true)
	m := e.Model().(*Backend).Model
	ids := longestRef(t, "tiny-moe.refs.json")
	const steps = 16
	snaps := map[int]*Snapshot{}
	disks := map[int][]byte{}
	for _, bits := range []int{model.KVInt8, model.KVBF16, model.KVFloat32} {
		orig, snap := snapshotAfter(t, m, StateOptions{KVInitial: 4, KVBits: bits}, ids)
		sn := snap.(*Snapshot)
		if sn.KVBits() != bits || sn.Len() != len(ids) {
			t.Fatalf("%d-bit state: snapshot of %d bits and %d tokens", bits, sn.KVBits(), sn.Len())
		}
		snaps[bits] = sn
		var disk bytes.Buffer
		if _, err := sn.WriteTo(&disk); err != nil {
			t.Fatal(err)
		}
		disks[bits] = disk.Bytes()
		want, wantRows := decodeGreedy(t, orig, steps)
		for _, fromDisk := range []bool{false, true} {
			st, err := m.NewState(StateOptions{KVInitial: 2, KVBits: bits})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var rs model.Snapshot = sn
			if fromDisk {
				if rs, err = st.ReadSnapshot(bytes.NewReader(disks[bits])); err != nil {
					t.Fatal(err)
				}
				if !sameSnapshot(rs.(*Snapshot), sn) || rs.Bytes() != sn.Bytes() {
					t.Errorf("%d-bit: the snapshot read back from bytes differs from the one written", bits)
				}
			}
			if err := st.Restore(rs); err != nil {
				t.Fatal(err)
			}
			got, rows := decodeGreedy(t, st, steps)
			same := 0
			for same < steps && bitsEqual(rows[same], wantRows[same]) {
				same++
			}
			t.Logf("FIDELITY snapshot %d-bit KV (from bytes %v, %d bytes in memory): greedy equal %v, logits bitwise equal for %d of %d steps",
				bits, fromDisk, sn.Bytes(), slices.Equal(got, want), same, steps)
			if !slices.Equal(got, want) || same != steps {
				t.Errorf("%d-bit (from bytes %v): restored greedy %v, original %v; logits differ from step %d", bits, fromDisk, got, want, same)
			}
		}
	}
	if !(snaps[8].Bytes() < snaps[16].Bytes() && snaps[16].Bytes() < snaps[32].Bytes()) {
		t.Errorf("snapshot bytes at 8, 16, 32 bits: %d, %d, %d; want them to shrink with the width", snaps[8].Bytes(), snaps[16].Bytes(), snaps[32].Bytes())
	}
	for _, tc := range [][2]int{{8, 16}, {16, 32}, {32, 8}} {
		from, into := tc[0], tc[1]
		st, err := m.NewState(StateOptions{KVBits: into})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		want := fmt.Sprintf("KV cache is %d-bit, this sequence's %d-bit", from, into)
		if err := st.Restore(snaps[from]); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Restore of a %d-bit snapshot into a %d-bit state: %v, want %q", from, into, err, want)
		}
		if _, err := st.ReadSnapshot(bytes.NewReader(disks[from])); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadSnapshot of a %d-bit snapshot into a %d-bit state: %v, want %q", from, into, err, want)
		}
		if err := st.Forward(ids[:4]); err != nil {
			t.Errorf("a %d-bit state that refused a %d-bit snapshot no longer runs: %v", into, from, err)
		}
	}
}

// Through the runtime's sessions at --kv-bits 8 and 16, as the server's
// prompt cache uses them: half a prompt prefilled, snapshotted, restored
// into another session of the width (in memory and from bytes) and the
// rest fed gives the greedy tokens of a cold prefill at that width.
func TestSnapshotKVWidthResumesLikeAColdPrefill(t *testing.T) {
	needGPU(t)
	e := loadEngine(t, install(t, "tiny-moe-fused", 4), true)
	ids := longestRef(t, "tiny-moe.refs.json")
	const steps = 16
	for _, bits := range []int{model.KVInt8, model.KVBF16} {
		cold := greedyAt(t, e, ids, bits, steps)
		resumesLikeCold(t, e, ids, runtime.SessionOptions{KVInitial: 16, KVBits: bits}, steps, cold,
			fmt.Sprintf("%d-bit KV ", bits), fmt.Sprintf("%d-bit, ", bits))
	}
}

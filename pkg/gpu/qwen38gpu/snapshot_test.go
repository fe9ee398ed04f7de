package qwen38gpu

import (
	"bytes"
	"context"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/gpu/cuda/cudatest"
	"github.com/nvmai/nvmai/pkg/models/qwen38"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// hostModel is a Model without a device, enough for the codec: the
// tiny-qwen38 geometry and its PLE layers.
func hostModel(t *testing.T) *Model {
	t.Helper()
	cfg := tinyConfig(t)
	m := &Model{cfg: cfg, g: newGeometry(cfg)}
	for k, l := range cfg.PLELayers {
		m.ple = append(m.ple, &pleW{index: k, layer: l})
	}
	return m
}

// randomSnapshot fills every array of a pos-token snapshot.
func randomSnapshot(m *Model, bits, pos int, seed uint64) *Snapshot {
	r := rand.New(rand.NewPCG(seed, 1))
	sn := m.newSnapshot(bits, pos)
	for l, kind := range m.cfg.Layers {
		if kind == qwen38.LinearAttention {
			sn.conv[l], sn.rec[l] = make([]float32, (m.g.K-1)*m.g.C), make([]float32, m.g.gdn.Hv*m.g.gdn.Dk*m.g.gdn.Dv)
		} else {
			sn.attn[l] = m.attnRows(bits, pos)
		}
	}
	for k := range sn.pleConv {
		sn.pleConv[k] = make([]float32, (m.g.Kp-1)*m.g.N*m.g.SH)
	}
	for _, a := range sn.arrays() {
		for i := range a.f {
			a.f[i] = float32(r.NormFloat64())
		}
		for i := range a.b {
			a.b[i] = int8(r.Uint32())
		}
	}
	for i := range min(pos, m.g.N-1) {
		sn.recent = append(sn.recent, 1+i)
	}
	sn.logits = make([]float32, m.g.V)
	for i := range sn.logits {
		sn.logits[i] = float32(r.NormFloat64())
	}
	sn.next = 5
	return sn
}

// TestSnapshotCodecRoundTrip: a snapshot written and read back is equal
// array for array at every KV width; a CPU engine state, another width, a
// cut file or one past the context is refused by what differs.
func TestSnapshotCodecRoundTrip(t *testing.T) {
	m := hostModel(t)
	for _, bits := range []int{32, 16, 8} {
		for _, pos := range []int{0, 1, 37} {
			sn := randomSnapshot(m, bits, pos, uint64(bits*100+pos))
			var buf bytes.Buffer
			if _, err := sn.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			st := &State{m: m, kvBits: bits, maxCtx: 64}
			got, err := st.ReadSnapshot(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatalf("bits %d pos %d: %v", bits, pos, err)
			}
			if !reflect.DeepEqual(got, sn) {
				t.Fatalf("bits %d pos %d: the snapshot read back differs", bits, pos)
			}
		}
	}
	var good bytes.Buffer
	randomSnapshot(m, 8, 37, 1).WriteTo(&good)
	cpu := append([]byte("Q38S"), good.Bytes()[4:]...)
	for _, c := range []struct {
		name   string
		data   []byte
		bits   int
		maxCtx int
		want   string
	}{
		{"cpu state", cpu, 8, 64, "CPU engine state"},
		{"kv width", good.Bytes(), 32, 64, "8-bit, this sequence's 32-bit"},
		{"context", good.Bytes(), 8, 20, "more than the sequence's context of 20"},
		{"cut", good.Bytes()[:good.Len()-7], 8, 64, "logits"},
		{"cut header", good.Bytes()[:10], 8, 64, "header"},
		{"magic", append([]byte("NGPS"), good.Bytes()[4:]...), 8, 64, "not a qwen4_exp GPU snapshot"},
	} {
		st := &State{m: m, kvBits: c.bits, maxCtx: c.maxCtx}
		_, err := st.ReadSnapshot(bytes.NewReader(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
}

// TestQwen38GPUSnapshotContinuesBitwise: on the GPU, a sequence restored
// from a snapshot (in RAM, and written to disk and read back) at every KV
// width continues with bitwise the logits and greedy tokens of the
// sequence fed the whole prompt cold; a snapshot of another width is
// refused.
func TestQwen38GPUSnapshotContinuesBitwise(t *testing.T) {
	cudatest.Need(t)
	for _, c := range []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"synth-8bit", func(t *testing.T) string { return synthInstall(t, 8) }},
		{"fixture-16bit", func(t *testing.T) string { return qwen38Fixture16(t) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := loadEngine(t, c.dir(t), true)
			ids := synthPrompt(60, e.Install.Manifest.Geometry.Qwen4Exp.PLEResetTokenID)
			head, tail := ids[:41], ids[41:] // a split past the dense window and mid-block
			for _, bits := range []int{32, 16, 8} {
				wantRow, want := generate(t, e, ids, 12, bits)
				for _, disk := range []bool{false, true} {
					src := e.NewSession(runtime.SessionOptions{KVInitial: 16, KVBits: bits})
					if err := src.Prefill(context.Background(), head, 0); err != nil {
						t.Fatal(err)
					}
					snap := src.Snapshot()
					if snap == nil {
						t.Fatal("the GPU session gave no snapshot")
					}
					// Feed the source more, so the restored state owes nothing to it.
					if err := src.Prefill(context.Background(), tail[:3], 0); err != nil {
						t.Fatal(err)
					}
					dst := e.NewSession(runtime.SessionOptions{KVInitial: 4, KVBits: bits})
					if disk {
						snap = diskRoundTrip(t, dst, snap)
					}
					if err := dst.Restore(snap); err != nil {
						t.Fatal(err)
					}
					gotRow, got := generateOn(t, dst, tail, 12)
					if d := cudatest.MaxAbsDiff(gotRow, wantRow); d != 0 || !equalInts(got, want) {
						t.Errorf("kv %d disk %v: restored logits differ by %g, greedy %v, cold %v", bits, disk, d, got, want)
					}
					src.Close()
					dst.Close()
				}
			}
			a := e.NewSession(runtime.SessionOptions{KVBits: 8})
			defer a.Close()
			if err := a.Prefill(context.Background(), head, 0); err != nil {
				t.Fatal(err)
			}
			b := e.NewSession(runtime.SessionOptions{KVBits: 32})
			defer b.Close()
			if err := b.Restore(a.Snapshot()); err == nil || !strings.Contains(err.Error(), "8-bit") {
				t.Errorf("an 8-bit snapshot into a 32-bit sequence: %v", err)
			}
		})
	}
}

func qwen38Fixture16(t *testing.T) string {
	return fixinstall.Install(t, fixture(t, qwen38Layouts[0]), 16)
}

func equalInts(a, b []int) bool { return reflect.DeepEqual(a, b) }

// generateOn is generate on session s: the logits after ids and n greedy
// tokens.
func generateOn(t testing.TB, s *runtime.Session, ids []int, n int) ([]float32, []int) {
	t.Helper()
	var row []float32
	res, err := s.Generate(context.Background(), ids, runtime.GenerateOptions{MaxTokens: n, IgnoreEOS: true, OnLogits: func(r []float32) error {
		if row == nil {
			row = slices.Clone(r)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return row, res.IDs
}

// diskRoundTrip writes snap's state as the disk prompt cache does and reads
// it back through dst.
func diskRoundTrip(t *testing.T, dst *runtime.Session, snap *runtime.Snapshot) *runtime.Snapshot {
	t.Helper()
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := dst.ReadSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

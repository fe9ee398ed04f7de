package qwen38gpu

import (
	"context"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// The engine is registered for (qwen4_exp, gpu), loads its own experts,
// and its footprint needs no device: the CPU engine's checks, the state
// in VRAM (no host KV or recurrent bytes), the n-gram reader's buffers on
// the host. A rope scaling is refused as on the CPU.
func TestRegisteredForQwen4ExpOnGPU(t *testing.T) {
	e, err := model.Lookup(packexperts.ArchQwen4Exp, model.GPU)
	if err != nil {
		t.Fatal(err)
	}
	if !e.HoldsExperts {
		t.Error("the entry does not say it holds the experts: the runtime would open an expert cache too")
	}
	dir := t.TempDir() + "/m"
	if _, err := convert.Synth(context.Background(), convert.SynthOptions{Geometry: "tiny-qwen38", Bits: 4, Output: dir, Seed: 1, Threads: 1}); err != nil {
		t.Fatal(err)
	}
	man, _, err := packexperts.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := e.Footprint(model.FootprintRequest{Manifest: man})
	if err != nil {
		t.Fatal(err)
	}
	if f.KV != 0 || f.Recurrent != 0 || f.Attention != 0 || f.ReadBuffers <= 0 || f.KVBits != model.DefaultKVBits {
		t.Errorf("footprint %+v: want no host KV, recurrent or attention bytes, the n-gram buffers, KV bits %d", f, model.DefaultKVBits)
	}
	if _, err := e.Footprint(model.FootprintRequest{Manifest: man, RopeScaling: model.RopeYaRN}); err == nil {
		t.Error("a YaRN rope scaling was accepted")
	}
	// Through the runtime: it loads (a GPU here) or fails at the device,
	// never because the architecture has no GPU engine.
	eng, err := runtime.Load(dir, runtime.Options{Device: model.GPU})
	if err == nil {
		if info := eng.Model().Info(); info.Architecture != packexperts.ArchQwen4Exp || info.Device != model.GPU {
			t.Errorf("loaded %+v", info)
		}
		eng.Close()
		return
	}
	if strings.Contains(err.Error(), "does not run on") || !strings.Contains(err.Error(), "--engine gpu") {
		t.Fatalf("runtime.Load on the GPU: %v", err)
	}
	t.Logf("no GPU here: %v", err)
}

// sparsePass is true exactly when a pass's last token sees more than B
// complete blocks (tiny-qwen38: cr 4, B 2, so past 11 visible tokens).
func TestSparsePass(t *testing.T) {
	is := IndexerShape{Block: 4, Keep: 2}
	for _, c := range []struct {
		pos, T int
		want   bool
	}{{0, 11, false}, {0, 12, true}, {10, 1, false}, {11, 1, true}, {100, 1, true}, {0, 1, false}} {
		if got := sparsePass(c.pos, c.T, is); got != c.want {
			t.Errorf("pos %d, %d tokens: sparse %v, want %v", c.pos, c.T, got, c.want)
		}
	}
}

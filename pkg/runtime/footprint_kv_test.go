package runtime

import (
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
)

// TestComputeFootprint: the KV figure is what a session of that width
// allocates at full context, the slots are the cache's, YaRN extends the
// context, and CheckFits refuses what does not fit with the numbers.
func TestComputeFootprint(t *testing.T) {
	dir := install(t, "tiny-moe-fused", 4)
	e, err := Load(dir, Options{Threads: 2, Experts: ExpertOptions{Slots: 8}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	native := cpuModel(t, e).Config().MaxContext
	for _, bits := range []int{8, 16, 32} {
		f, err := ComputeFootprint(e.Install, FootprintOptions{KVBits: bits, Experts: ExpertOptions{Slots: 8}, Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		sess := e.NewSession(SessionOptions{KVBits: bits, KVInitial: native})
		if got := cpuState(t, sess).KVBytes(); got != f.KV {
			t.Errorf("kv%d: footprint KV %d bytes, a full-context session holds %d", bits, f.KV, got)
		}
		x := e.Install.Manifest.Experts
		if f.Slots != 8 || f.ExpertSlots != 8*x.Stride*int64(len(x.Layers)) || f.MaxContext != native {
			t.Errorf("kv%d: %+v", bits, f)
		}
		sum := f.Resident + f.ExpertSlots + f.KV + f.KVGrowth + f.Recurrent + f.Scratch + f.PassScratch
		if f.Total != sum || f.Resident == 0 || f.Recurrent == 0 || f.PassScratch == 0 {
			t.Errorf("kv%d: total %d, parts add up to %d: %+v", bits, f.Total, sum, f)
		}
		t.Log(f)
	}
	f8, _ := ComputeFootprint(e.Install, FootprintOptions{KVBits: 8})
	f32, _ := ComputeFootprint(e.Install, FootprintOptions{KVBits: 32})
	if r := float64(f32.KV) / float64(f8.KV); r < 3.5 || r > 4 {
		t.Errorf("float32 KV / int8 KV = %.2f, want just under 4", r)
	}
	y, err := ComputeFootprint(e.Install, FootprintOptions{RopeScaling: "yarn", MaxContext: 2 * native})
	if err != nil || y.MaxContext != 2*native {
		t.Errorf("YaRN 2x: %+v, %v", y, err)
	}
	if f, err := ComputeFootprint(e.Install, FootprintOptions{MaxContext: 2 * native}); err != nil || f.MaxContext != native {
		t.Errorf("a max context past the model's without YaRN: %d tokens, %v; want lowered to %d", f.MaxContext, err, native)
	}
	if _, err := ComputeFootprint(e.Install, FootprintOptions{KVBits: 4}); err == nil {
		t.Error("4-bit KV accepted")
	}
	if err := f8.CheckFits(f8.Total + FootprintMargin(f8.Total+expertcache.GiB) + expertcache.GiB); err != nil {
		t.Errorf("a footprint with room to spare refused: %v", err)
	}
	err = f8.CheckFits(f8.Total)
	if err == nil || !strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), expertcache.FormatSize(f8.Total)) {
		t.Errorf("a footprint as large as the machine: %v", err)
	}
	if qwen35.DefaultKVBits != f8.KVBits {
		t.Errorf("default width %d", f8.KVBits)
	}
}

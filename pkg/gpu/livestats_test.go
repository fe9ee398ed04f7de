package gpu

import (
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
)

// Each layer's hits and misses count decode picks and prefill's staged
// experts, as ExpertStats' totals do, so the heat strip sums to them.
func TestLayerStatsSumToTotals(t *testing.T) {
	var s StreamStats
	s.Layers = make([][gpukernels.SlotStatsWords]int64, 3)
	for i := range s.Layers {
		for j := range gpukernels.SlotStatsWords {
			s.Layers[i][j] = int64(100*i + j + 1)
		}
		l := s.Layers[i]
		s.DecodeHits += l[0]
		s.DecodeMisses += l[1]
		s.PrefillFromVRAM += l[3]
		s.PrefillFromHost += l[4]
	}
	layers := layerStatsOf(s)
	var hits, misses int64
	for i, l := range layers {
		if want := s.Layers[i][0] + s.Layers[i][3]; l.Hits != want {
			t.Errorf("layer %d: %d hits, want %d", i, l.Hits, want)
		}
		hits, misses = hits+l.Hits, misses+l.Misses
	}
	if hits != s.DecodeHits+s.PrefillFromVRAM || misses != s.DecodeMisses+s.PrefillFromHost {
		t.Fatalf("layers sum to %d/%d, totals %d/%d", hits, misses, s.DecodeHits+s.PrefillFromVRAM, s.DecodeMisses+s.PrefillFromHost)
	}
}

// The plan's split: streamed (slots and staging), resident (every
// expert) and dense (the uploaded weights are the trunk).
func TestDeviceMemoryOfPlan(t *testing.T) {
	streamed := Plan{TrunkBytes: 30, StateBytes: 5, ExpertBytes: 1000, Experts: 8, TopK: 2, Layers: 2, Stride: 10}
	streamed.setSlots(6)
	resident := streamed
	resident.setSlots(8)
	for _, c := range []struct {
		name string
		p    Plan
		want model.DeviceMemory
	}{
		{"streamed", streamed, model.DeviceMemory{Used: 70, Total: 100, Trunk: 30, State: 5, Experts: 120, Staging: 80, Streamed: true}},
		{"resident", resident, model.DeviceMemory{Used: 70, Total: 100, Trunk: 30, State: 5, Experts: 1000}},
		{"dense", Plan{}, model.DeviceMemory{Used: 70, Total: 100, Trunk: 42}},
	} {
		if got := deviceMemoryOf(c.p, 42, 30, 100); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// On the device, through runtime.Engine as serve reads it: streamed (8 of
// the tiny-moe fixture's 16 experts a layer), the per-layer counters sum
// to ExpertStats' totals, the mode marks the bytes as PCIe copies, and the
// device memory is the plan's split of a plausible device; resident, no
// counters and every expert in VRAM.
func TestLiveFiguresOnDevice(t *testing.T) {
	needGPU(t)
	dir := install(t, "tiny-moe-fused", 4)
	ids := loadRefs(t, "tiny-moe.refs.json")[0].IDs
	for _, slots := range []int{8, 0} {
		e := loadGPUWith(t, dir, slots, 0)
		greedy(t, e, ids, 9)
		p := e.Model().(*Backend).Model.Plan()
		st, layers := e.ExpertStatsByLayer()
		total := e.ExpertStats()
		mem, ok := e.DeviceMemory()
		e.Close()
		if !ok || mem.Total <= 0 || mem.Used <= 0 || mem.Used > mem.Total || mem.Trunk != p.TrunkBytes || mem.State != p.StateBytes {
			t.Fatalf("%d slots: device memory %+v (%v), plan %+v", slots, mem, ok, p)
		}
		if slots == 0 {
			if st.Mode != "" || layers != nil || mem.Streamed || mem.Experts != p.ExpertBytes {
				t.Errorf("resident: counters %+v %v, memory %+v", st, layers, mem)
			}
			continue
		}
		var hits, misses int64
		for _, l := range layers {
			hits, misses = hits+l.Hits, misses+l.Misses
		}
		t.Logf("LIVE streamed %d slots: %d hits %d misses %d PCIe bytes over %d layers; VRAM %d of %d MiB, slots %d MiB", slots, st.Hits, st.Misses, st.BytesRead, len(layers), mem.Used>>20, mem.Total>>20, mem.Experts>>20)
		if st.Mode != model.ExpertModeGPUPinned || len(layers) != p.Layers || hits != st.Hits || misses != st.Misses || hits+misses == 0 || st != total {
			t.Errorf("streamed: totals %+v, layers %+v summing to %d/%d, ExpertStats %+v", st, layers, hits, misses, total)
		}
		if !mem.Streamed || mem.Experts != p.SlotBytes || mem.Staging != p.StagingBytes {
			t.Errorf("streamed: memory %+v, plan %+v", mem, p)
		}
	}
}

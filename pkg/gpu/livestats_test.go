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

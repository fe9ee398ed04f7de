package runtime

import (
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/model"
)

// deviceModel is a model that streams its own experts and reports its
// device memory, as the GPU engine does.
type deviceModel struct {
	model.Model
	stats  expertcache.Stats
	layers []expertcache.LayerStats
	mem    model.DeviceMemory
}

func (d *deviceModel) ExpertStats() expertcache.Stats { return d.stats }
func (d *deviceModel) ExpertStatsByLayer() (expertcache.Stats, []expertcache.LayerStats) {
	return d.stats, d.layers
}
func (d *deviceModel) DeviceMemory() (model.DeviceMemory, error) { return d.mem, nil }

// An engine without a host expert cache reports the model's own counters
// per layer and its device memory; the CPU engine's model reports none.
func TestEngineReportsDeviceModelStats(t *testing.T) {
	dm := &deviceModel{
		stats:  expertcache.Stats{Hits: 5, Misses: 3, BytesRead: 300, Mode: model.ExpertModeGPUPinned},
		layers: []expertcache.LayerStats{{Hits: 4, Misses: 1}, {Hits: 1, Misses: 2}},
		mem:    model.DeviceMemory{Used: 10, Total: 80, Trunk: 4, State: 2, Experts: 3, Streamed: true},
	}
	e := &Engine{model: dm}
	st, layers := e.ExpertStatsByLayer()
	if st != dm.stats || !slices.Equal(layers, dm.layers) || e.ExpertStats() != dm.stats {
		t.Fatalf("by layer %+v %+v, totals %+v; want %+v %+v", st, layers, e.ExpertStats(), dm.stats, dm.layers)
	}
	if m, ok := e.DeviceMemory(); !ok || m != dm.mem {
		t.Fatalf("device memory %+v (%v), want %+v", m, ok, dm.mem)
	}
	cpu := &Engine{model: struct{ model.Model }{}}
	if _, ok := cpu.DeviceMemory(); ok {
		t.Fatal("a model without device memory reported some")
	}
	if st, layers := cpu.ExpertStatsByLayer(); st.Mode != "" || layers != nil {
		t.Fatalf("a model without an expert cache reported %+v %+v", st, layers)
	}
}

package server

import (
	"testing"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/model"
)

// The GPU engine's VRAM slot counters (Mode gpu-pinned) are reported as
// bytes over PCIe, the CPU cache's as bytes read from disk.
func TestExpertCacheStatsMarksPCIe(t *testing.T) {
	for _, c := range []struct {
		mode string
		pcie bool
	}{{model.ExpertModeGPUPinned, true}, {"direct", false}, {"buffered", false}} {
		got := expertCacheStats(expertcache.Stats{Hits: 3, Misses: 2, BytesRead: 200, Mode: c.mode})
		if want := (ExpertCacheStats{Hits: 3, Misses: 2, BytesRead: 200, PCIe: c.pcie}); got != want {
			t.Errorf("mode %s: %+v, want %+v", c.mode, got, want)
		}
	}
}

package runtime

import (
	"fmt"
	"os"
	"testing"

	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
)

// TestFootprintTable prints docs/kv-cache.md's KV table for the full
// 35B-A3B geometry when NVMAI_FOOTPRINT_TABLE=1 (the figures are
// KVBytesPerToken's, which TestComputeFootprint ties to real allocations).
func TestFootprintTable(t *testing.T) {
	if os.Getenv("NVMAI_FOOTPRINT_TABLE") == "" {
		t.Skip("set NVMAI_FOOTPRINT_TABLE=1 to print the table")
	}
	sg, err := convert.LookupSynthGeometry("qwen3.5-35b-a3b", 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := qwen35.ConfigFromGeometry(sg.Architecture, sg.Geometry)
	if err != nil {
		t.Fatal(err)
	}
	full := 0
	for _, k := range cfg.Layers {
		if k == qwen35.FullAttention {
			full++
		}
	}
	fmt.Printf("| context | 8-bit KV | 16-bit KV | 32-bit KV |\n|---|---|---|---|\n")
	for _, ctx := range []int{4096, 32768, 131072, 262144, 524288, 1048576} {
		row := fmt.Sprintf("| %d", ctx)
		for _, bits := range []int{8, 16, 32} {
			row += " | " + expertcache.FormatSize(cfg.KVBytesPerToken(bits)*int64(full)*int64(ctx))
		}
		fmt.Println(row + " |")
	}
	fmt.Printf("recurrent state %s; per token per full-attention layer: %d / %d / %d bytes\n", expertcache.FormatSize(cfg.StateBytes(0)),
		cfg.KVBytesPerToken(8), cfg.KVBytesPerToken(16), cfg.KVBytesPerToken(32))
}

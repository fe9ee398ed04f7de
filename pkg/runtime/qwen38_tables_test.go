package runtime

import (
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/models/qwen38"
)

// TestOpenNgramTablesReadsAsTheCPUEngine: the tables an engine without an
// expert cache opens (the GPU engine) give the rows the CPU engine's
// reader gives, read ahead or not; a malformed NVMAI_BOUNDED_IO is refused
// by name.
func TestOpenNgramTablesReadsAsTheCPUEngine(t *testing.T) {
	dir := install(t, qwen38Layouts[0], 16) // a trained table: the synthetic ones are zeros
	e, err := Load(dir, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cpu := e.model.(*q38Model)
	cfg := cpu.m.Config()
	tables, err := OpenNgramTables(dir, e.Install.Manifest, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tables.Close()
	ids := qwen38.NewNgramHasher(cfg, 0).Rows(nil, []int{3, 77, cfg.EOS, 12, 4000})
	dr := cfg.NgramRowWidth()
	want, got, ahead := make([]float32, len(ids)*dr), make([]float32, len(ids)*dr), make([]float32, len(ids)*dr)
	if err := cpu.tables.Rows(0, ids, want); err != nil {
		t.Fatal(err)
	}
	if err := tables.Rows(0, ids, got); err != nil {
		t.Fatal(err)
	}
	tables.Prefetch(0, ids)
	if err := tables.Rows(0, ids, ahead); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(want, func(v float32) bool { return v != 0 }) {
		t.Fatal("the synthetic table's rows are all zero: the comparison would prove nothing")
	}
	if !slices.Equal(got, want) || !slices.Equal(ahead, want) {
		t.Fatal("rows differ from the CPU engine's reader")
	}
	t.Setenv(expertcache.BoundedIOEnv, "maybe")
	if _, err := OpenNgramTables(dir, e.Install.Manifest, cfg); err == nil || !strings.Contains(err.Error(), expertcache.BoundedIOEnv) {
		t.Fatalf("NVMAI_BOUNDED_IO=maybe: %v", err)
	}
}

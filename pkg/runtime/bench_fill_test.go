package runtime

import (
	"context"
	"testing"
)

// TestBenchFillContext: with FillContext the prompt and its generated
// tokens end the context at exactly that many tokens, at the asked width,
// and a fill too short for them is refused.
func TestBenchFillContext(t *testing.T) {
	e, err := Load(install(t, "tiny-moe-fused", 4), Options{Threads: 2, Experts: ExpertOptions{Slots: 6}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const tokens, promptTokens, fill = 4, 8, 3000
	cfg := cpuModel(t, e).Config()
	for _, bits := range []int{8, 32} {
		r, err := e.Bench(context.Background(), BenchOptions{Tokens: tokens, PromptTokens: promptTokens, MemBandwidthBytes: -1, DiskReads: -1,
			KVBits: bits, FillContext: fill})
		if err != nil {
			t.Fatal(err)
		}
		run := r.Runs[0]
		rows := fill - promptTokens - tokens
		lo, hi := float64(cfg.StateBytesAt(rows+promptTokens+1, bits)), float64(cfg.StateBytesAt(fill, bits))
		if run.StateBytesPerToken < lo || run.StateBytesPerToken > hi || run.DecodeTokS <= 0 {
			t.Errorf("kv%d: state bytes per token %g, want within [%g, %g] (%+v)", bits, run.StateBytesPerToken, lo, hi, run)
		}
	}
	if _, err := e.Bench(context.Background(), BenchOptions{Tokens: tokens, PromptTokens: promptTokens, MemBandwidthBytes: -1, DiskReads: -1, FillContext: 10}); err == nil {
		t.Error("a fill shorter than prompt and generation was accepted")
	}
}

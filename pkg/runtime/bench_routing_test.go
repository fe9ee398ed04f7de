package runtime

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/routing"
)

// recordingSource remembers every (position, layer) a run asks for.
type recordingSource struct {
	routing.Source
	mu    sync.Mutex
	asked map[[2]int]int
}

func (r *recordingSource) Experts(pos, layer int, dst []int) ([]int, error) {
	r.mu.Lock()
	r.asked[[2]int{pos, layer}]++
	r.mu.Unlock()
	return r.Source.Experts(pos, layer, dst)
}

// writeTrace writes tokens positions of agent-regime routing for geom.
func writeTrace(t *testing.T, geom routing.Geometry, tokens int) (string, *routing.Trace) {
	t.Helper()
	tr, err := routing.Generate(geom, routing.Agent, tokens, 5)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "route.txt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, tr
}

const routingPromptTokens, routingTokens = 12, 5 // positions 0 … 15: 12 prompt tokens, 4 decode steps

func routingBench(t *testing.T, e *Engine, src routing.Source) (*BenchReport, error) {
	return routingBenchChunked(e, src, 0)
}

func routingBenchChunked(e *Engine, src routing.Source, chunk int) (*BenchReport, error) {
	return e.Bench(context.Background(), BenchOptions{Tokens: routingTokens, PromptTokens: routingPromptTokens,
		Prompts: BenchPrompts[:1], MemBandwidthBytes: -1, DiskReads: -1, Routing: src, PrefillChunk: chunk})
}

// TestBenchReplaysRoutingTrace: with --routing-trace every prompt token
// (prefill passes of 5, token by token) and every decode step asks the
// trace for its position's experts in each layer, the decode's MoE layers
// use exactly the trace's ids (as NVMAI_ROUTE_TRACE records them), and
// the report names the file by its sha256 and adds per-layer figures that
// agree with the cache's totals; on both architectures.
func TestBenchReplaysRoutingTrace(t *testing.T) {
	for _, snapshot := range []string{"tiny-moe-fused", qwen38Layouts[0]} {
		t.Run(snapshot, func(t *testing.T) { replaysRoutingTrace(t, snapshot) })
	}
}

func replaysRoutingTrace(t *testing.T, snapshot string) {
	recorded := filepath.Join(t.TempDir(), "recorded.txt")
	t.Setenv(RouteTraceEnv, recorded)
	e, err := Load(install(t, snapshot, 4), Options{Threads: 2, Experts: ExpertOptions{Slots: 6}})
	if err != nil {
		t.Fatal(err)
	}
	geom, err := e.RoutingGeometry()
	if err != nil {
		t.Fatal(err)
	}
	path, tr := writeTrace(t, geom, routingPromptTokens+routingTokens-1)
	src, err := routing.OpenTrace(path, geom, false)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingSource{Source: src, asked: map[[2]int]int{}}
	r, err := routingBenchChunked(e, rec, 5)
	e.Close() // flushes the recorded trace
	if err != nil {
		t.Fatal(err)
	}

	raw, _ := os.ReadFile(path)
	sum := sha256.Sum256(raw)
	if want := "trace " + path + " sha256 " + hex.EncodeToString(sum[:]); r.Routing != want || r.RoutingWrapped {
		t.Errorf("routing %q (wrapped %v), want %q", r.Routing, r.RoutingWrapped, want)
	}
	for pos := range routingPromptTokens + routingTokens - 1 {
		for l := range geom.Layers {
			if n := rec.asked[[2]int{pos, l}]; n != 1 {
				t.Fatalf("position %d layer %d asked %d times, want once", pos, l, n)
			}
		}
	}
	if len(rec.asked) != (routingPromptTokens+routingTokens-1)*geom.Layers {
		t.Errorf("the run asked for %d (position, layer) pairs, want %d", len(rec.asked), (routingPromptTokens+routingTokens-1)*geom.Layers)
	}

	f, err := os.Open(recorded)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	for sc := bufio.NewScanner(f); sc.Scan(); lines++ {
		fields := strings.Fields(sc.Text())
		var v []int
		for _, s := range fields {
			n, _ := strconv.Atoi(s)
			v = append(v, n)
		}
		pos, layer, got := v[0], v[1], v[2:]
		var want []int
		for _, id := range tr.Row(pos, layer) {
			want = append(want, int(id))
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("decode position %d layer %d used experts %v, the trace names %v", pos, layer, got, want)
		}
	}
	if want := (routingTokens - 1) * geom.Layers; lines != want {
		t.Errorf("the decode recorded %d layer steps, want %d", lines, want)
	}

	run := r.Runs[0]
	steps := float64(routingTokens - 1)
	if !(run.LayerHitRateMin <= run.HitRate && run.HitRate <= run.LayerHitRateMax) {
		t.Errorf("hit rate %g outside its layers' [%g, %g]", run.HitRate, run.LayerHitRateMin, run.LayerHitRateMax)
	}
	if want := float64(run.Misses) / (steps * float64(geom.Layers)); math.Abs(run.NewExpertsPerLayerToken-want) > 1e-9 {
		t.Errorf("%g new experts per layer per step, want misses %d over %g steps × %d layers = %g", run.NewExpertsPerLayerToken, run.Misses, steps, geom.Layers, want)
	}
	if run.WaitsPerToken < 0 || run.WaitsPerToken > float64(geom.Layers) || (run.Misses > 0) != (run.WaitsPerToken > 0) {
		t.Errorf("%g waits per step with %d misses over %d layers", run.WaitsPerToken, run.Misses, geom.Layers)
	}
}

// TestBenchRoutingTraceTooShort: a trace with fewer positions than a run
// needs stops the bench with an error saying so, unless it wraps, and then
// the report says it wrapped.
func TestBenchRoutingTraceTooShort(t *testing.T) {
	e, err := Load(install(t, "tiny-moe-fused", 4), Options{Threads: 2, Experts: ExpertOptions{Slots: 6}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	geom, _ := e.RoutingGeometry()
	path, _ := writeTrace(t, geom, routingPromptTokens+routingTokens-2)
	short, err := routing.OpenTrace(path, geom, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := routingBench(t, e, short); err == nil || !strings.Contains(err.Error(), "has 15 positions and the run needs position 15") {
		t.Fatalf("short trace: error %v", err)
	}
	wrap, err := routing.OpenTrace(path, geom, true)
	if err != nil {
		t.Fatal(err)
	}
	r, err := routingBench(t, e, wrap)
	if err != nil {
		t.Fatal(err)
	}
	if !r.RoutingWrapped || !strings.HasPrefix(r.Routing, "trace "+path) {
		t.Errorf("wrapped trace: routing %q, wrapped %v", r.Routing, r.RoutingWrapped)
	}
}

// TestBenchRoutingSources: the report names the router's routing
// "uniform" and a synthetic one by regime and seed, with the per-layer
// figures either way; a dense model refuses a routing source.
func TestBenchRoutingSources(t *testing.T) {
	e, err := Load(install(t, "tiny-moe-fused", 4), Options{Threads: 2, Experts: ExpertOptions{Slots: 6}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, err := routingBench(t, e, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Routing != UniformRouting || r.Runs[0].LayerHitRateMax <= 0 && r.Runs[0].Misses == 0 {
		t.Errorf("router's routing: %q, run %+v", r.Routing, r.Runs[0])
	}
	geom, _ := e.RoutingGeometry()
	syn, err := routing.NewSynthetic(geom, routing.Spec{Regime: routing.Agent, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r, err = routingBench(t, e, syn); err != nil {
		t.Fatal(err)
	}
	if r.Routing != "synthetic agent seed=3" || r.RoutingWrapped {
		t.Errorf("synthetic routing reported as %q (wrapped %v)", r.Routing, r.RoutingWrapped)
	}
	if e.counted.on {
		t.Error("the per-layer counting stays on after the bench")
	}

	dense, err := Load(install(t, "tiny-dense", 4), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer dense.Close()
	if _, err := dense.RoutingGeometry(); err == nil || !strings.Contains(err.Error(), "no routed experts") {
		t.Errorf("dense RoutingGeometry: %v", err)
	}
	if _, err := routingBench(t, dense, syn); err == nil || !strings.Contains(err.Error(), "needs a Mixture-of-Experts model") {
		t.Errorf("dense bench with routing: %v", err)
	}
}

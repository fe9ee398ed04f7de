package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// layeredEngine is the fake engine with an expert cache whose counters
// grow by one hit per layer and one miss in layer 1 with each token, and a
// memory footprint; with pcie set it is the GPU engine streaming experts
// into VRAM slots (its misses copied over PCIe), with vram its device
// memory.
type layeredEngine struct {
	*servertest.Engine
	mu     sync.Mutex
	layers []server.ExpertLayerStats
	pcie   bool
	vram   *model.DeviceMemory
	reads  int // counter reads (ExpertCacheStats and ByLayer)
}

func newLayeredEngine() *layeredEngine {
	return &layeredEngine{Engine: &servertest.Engine{}, layers: make([]server.ExpertLayerStats, 3)}
}

func (e *layeredEngine) Generate(ctx context.Context, g server.Generation, onToken func(string) bool) (server.Outcome, error) {
	out, err := e.Engine.Generate(ctx, g, func(text string) bool {
		e.mu.Lock()
		for i := range e.layers {
			e.layers[i].Hits++
		}
		e.layers[1].Misses++
		e.mu.Unlock()
		return onToken(text)
	})
	out.CachedTokens = len(g.Prompt) / 2
	return out, err
}

func (e *layeredEngine) stats() server.ExpertCacheStats {
	var st server.ExpertCacheStats
	for _, l := range e.layers {
		st.Hits, st.Misses = st.Hits+l.Hits, st.Misses+l.Misses
	}
	st.BytesRead = st.Misses * 4096
	st.PCIe = e.pcie
	return st
}

func (e *layeredEngine) ExpertCacheStats() (server.ExpertCacheStats, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reads++
	return e.stats(), true
}

func (e *layeredEngine) ExpertCacheStatsByLayer() (server.ExpertCacheStats, []server.ExpertLayerStats, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reads++
	return e.stats(), append([]server.ExpertLayerStats(nil), e.layers...), true
}

func (e *layeredEngine) Memory() (server.Memory, bool) {
	m := server.Memory{Resident: 100, ExpertSlots: 200, KV: 300, Total: 700}
	if e.vram != nil {
		m.Device, m.VRAM = "gpu", e.vram
	}
	return m, true
}

func liveJSON(t *testing.T, h http.Handler, path, key string) httpapi.LiveSnapshot {
	t.Helper()
	rec := do(h, http.MethodGet, path, key, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	var snap httpapi.LiveSnapshot
	if err := json.Unmarshal(rec.Body.Bytes(), &snap); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, rec.Body)
	}
	return snap
}

// /v1/live.json (and /v1/live?once=1) report the same counters /metrics
// does, per-layer expert counts that sum to them, the last generation and
// the footprint; both need the API key when one is set.
func TestLiveSnapshotMatchesMetrics(t *testing.T) {
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	eng := newLayeredEngine()
	s.SetEngine(eng, servertest.Renderer{})
	h := serveAll(s, httpapi.Options{APIKey: "k"})
	for _, body := range []string{`{"messages":[{"role":"user","content":"hello there"}]}`, `{"messages":[{"role":"user","content":"and again"}],"stream":true}`} {
		if rec := do(h, http.MethodPost, "/v1/chat/completions", "k", body); rec.Code != http.StatusOK {
			t.Fatalf("chat: %d %s", rec.Code, rec.Body)
		}
	}
	for _, path := range []string{httpapi.LiveJSONPath, httpapi.LivePath + "?once=1"} {
		if rec := do(h, http.MethodGet, strings.Split(path, "?")[0], "", ""); rec.Code != http.StatusUnauthorized {
			t.Errorf("GET %s without the key: %d, want 401", path, rec.Code)
		}
	}
	req := httptest.NewRequest(http.MethodGet, httpapi.LivePath+"?once=1", nil)
	req.Host, req.Header["Authorization"] = "127.0.0.1", []string{"Bearer k"}
	once := httptest.NewRecorder()
	h.ServeHTTP(once, req)
	if once.Code != http.StatusOK || !strings.HasPrefix(once.Header().Get("Content-Type"), "application/json") {
		t.Fatalf("GET /v1/live?once=1: %d %q", once.Code, once.Header().Get("Content-Type"))
	}
	snap := liveJSON(t, h, httpapi.LiveJSONPath, "k")
	samples := scrape(t, h, "k")
	metric := func(name string) int64 {
		v, ok := value(samples, name)
		if !ok {
			t.Fatalf("/metrics has no %s", name)
		}
		return int64(v)
	}
	tot := snap.Totals
	if tot.ExpertCacheHits == nil || tot.ExpertCacheMisses == nil || tot.ExpertBytesRead == nil {
		t.Fatalf("expert totals missing: %+v", tot)
	}
	for name, got := range map[string]int64{
		"nvmai_prompt_tokens_total":              tot.PromptTokens,
		"nvmai_generated_tokens_total":           tot.GeneratedTokens,
		"nvmai_prompt_cache_reused_tokens_total": tot.PromptCacheReusedTokens,
		"nvmai_expert_cache_hits_total":          *tot.ExpertCacheHits,
		"nvmai_expert_cache_misses_total":        *tot.ExpertCacheMisses,
		"nvmai_expert_bytes_read_total":          *tot.ExpertBytesRead,
	} {
		if want := metric(name); got != want || want == 0 {
			t.Errorf("live %s = %d, /metrics %d", name, got, want)
		}
	}
	ec := snap.ExpertCache
	if ec == nil || len(ec.Layers) != 3 {
		t.Fatalf("expert_cache: %+v", ec)
	}
	var hits, misses int64
	for _, l := range ec.Layers {
		hits, misses = hits+l.Hits, misses+l.Misses
	}
	if hits != *tot.ExpertCacheHits || misses != *tot.ExpertCacheMisses || ec.Layers[0].Misses != 0 || ec.Layers[1].Misses == 0 {
		t.Errorf("layers %+v do not sum to the totals %d/%d", ec.Layers, *tot.ExpertCacheHits, *tot.ExpertCacheMisses)
	}
	g := snap.Generation
	if g == nil || g.Running || g.Model != "fake-model" || g.CachedTokens == nil || *g.CachedTokens != g.PromptTokens/2 || g.Tokens != 4 || g.TTFTS == nil {
		t.Fatalf("generation: %+v", g)
	}
	if g.DiskBytesPerToken == nil || *g.DiskBytesPerToken != 4096 || g.PCIeBytesPerToken != nil {
		t.Errorf("bytes per token: disk %v, PCIe %v; want 4096 and null", g.DiskBytesPerToken, g.PCIeBytesPerToken)
	}
	m := snap.Memory
	if m.Device != "cpu" || m.ResidentBytes == nil || *m.ResidentBytes != 100 || *m.ExpertSlotBytes != 200 || *m.KVBytes != 300 || *m.FootprintBytes != 700 || m.VRAMTotalBytes != nil {
		t.Errorf("memory: %+v", m)
	}
}

// On the GPU engine streaming experts (fake), the PCIe bytes per token, the
// PCIe total (equal to /metrics' nvmai_expert_pcie_bytes_total, with no
// disk counter beside it) and the VRAM figures are filled, the disk ones
// null; the counters are read at a generation's first token and end, not
// per token.
func TestLiveGPUReportsPCIeAndVRAM(t *testing.T) {
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	eng := newLayeredEngine()
	eng.pcie = true
	eng.vram = &model.DeviceMemory{Used: 60 << 30, Total: 80 << 30, Trunk: 3 << 30, State: 1 << 30, Experts: 8 << 30, Staging: 1 << 20, Streamed: true}
	eng.Script = func(string) []string { return []string{"a", "b", "c", "d", "e", "f", "g", "h"} }
	s.SetEngine(eng, servertest.Renderer{})
	h := serveAll(s, httpapi.Options{})
	if rec := do(h, http.MethodPost, "/v1/chat/completions", "", `{"messages":[{"role":"user","content":"hello there"}]}`); rec.Code != http.StatusOK {
		t.Fatalf("chat: %d %s", rec.Code, rec.Body)
	}
	eng.mu.Lock()
	reads := eng.reads
	eng.mu.Unlock()
	if reads > 2 {
		t.Errorf("a generation of 8 tokens read the expert counters %d times, want 2 (first token and end)", reads)
	}
	snap := liveJSON(t, h, httpapi.LiveJSONPath, "")
	samples := scrape(t, h, "")
	tot := snap.Totals
	if tot.ExpertPCIeBytes == nil || tot.ExpertBytesRead != nil {
		t.Fatalf("totals: PCIe %v, disk %v; want PCIe only", tot.ExpertPCIeBytes, tot.ExpertBytesRead)
	}
	if v, ok := value(samples, "nvmai_expert_pcie_bytes_total"); !ok || int64(v) != *tot.ExpertPCIeBytes || v == 0 {
		t.Errorf("/metrics nvmai_expert_pcie_bytes_total %v (%v), live %d", v, ok, *tot.ExpertPCIeBytes)
	}
	if _, ok := value(samples, "nvmai_expert_bytes_read_total"); ok {
		t.Error("/metrics reports disk bytes for an engine that copies its experts over PCIe")
	}
	g := snap.Generation
	if g == nil || g.PCIeBytesPerToken == nil || *g.PCIeBytesPerToken != 4096 || g.DiskBytesPerToken != nil {
		t.Fatalf("generation %+v: want 4096 PCIe bytes per token and no disk bytes", g)
	}
	m, v := snap.Memory, eng.vram
	for name, c := range map[string]struct {
		got  *int64
		want int64
	}{
		"vram_used_bytes": {m.VRAMUsedBytes, v.Used}, "vram_total_bytes": {m.VRAMTotalBytes, v.Total},
		"vram_trunk_bytes": {m.VRAMTrunkBytes, v.Trunk}, "vram_state_bytes": {m.VRAMStateBytes, v.State},
		"vram_expert_slot_bytes": {m.VRAMExpertSlotBytes, v.Experts}, "vram_staging_bytes": {m.VRAMStagingBytes, v.Staging},
	} {
		if c.got == nil || *c.got != c.want {
			t.Errorf("%s = %v, want %d", name, c.got, c.want)
		}
	}
	if m.Device != "gpu" || m.VRAMStreamed == nil || !*m.VRAMStreamed {
		t.Errorf("memory: %+v", m)
	}
}

// The stream sends an event per token of a slow generation (each token
// count seen, in order), then one for its end.
func TestLiveStreamsEveryToken(t *testing.T) {
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	eng := newLayeredEngine()
	eng.Script = func(string) []string { return []string{"a", "b", "c", "d", "e"} }
	eng.TokenDelay = 150 * time.Millisecond
	s.SetEngine(eng, servertest.Renderer{})
	hs := httptest.NewServer(serveAll(s, httpapi.Options{}))
	defer hs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+httpapi.LivePath, nil)
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	go func() {
		r, err := hs.Client().Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"go"}],"stream":true}`))
		if err == nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
	}()
	var seen []int
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	deadline := time.AfterFunc(10*time.Second, cancel)
	defer deadline.Stop()
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var snap httpapi.LiveSnapshot
		if err := json.Unmarshal([]byte(data), &snap); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		g := snap.Generation
		if g == nil {
			continue
		}
		if g.Running && (len(seen) == 0 || seen[len(seen)-1] != g.Tokens) {
			seen = append(seen, g.Tokens)
		}
		if !g.Running {
			if g.DecodeTokS == nil || g.Tokens != 6 {
				t.Errorf("ended generation: %+v", g)
			}
			break
		}
	}
	// The last token and the end come together (the fake engine ends at
	// once), within one liveMinGap: that event may show either.
	if got := fmt.Sprint(seen); got != "[0 1 2 3 4 5]" && got != "[0 1 2 3 4]" {
		t.Fatalf("token counts seen while running: %v, want each of 0…4 (5 too, or at the end)", seen)
	}
}

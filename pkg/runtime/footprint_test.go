package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/sample"
)

// footprintOverhead is the documented fixed part of a generating process's
// footprint beyond resident bytes + expert budget + KV (docs/streaming.md
// "Footprint"): the Go runtime and the binary's text, the tokenizer, the
// forward pass's scratch and garbage-collector headroom. Measured on the
// 4-layer 35B-A3B synthetic install with a full 256-token prefill chunk:
// about 82 MiB of anonymous memory beyond the slots plus about 12 MiB of
// binary text (scripts/footprint.sh); a 248k-entry tokenizer, as real
// Qwen3.5 installs carry, added 33 MiB to the peak. This test's tiny model
// needs about 6 MiB beyond resident + budget + KV.
const footprintOverhead = FootprintOverhead

// footprintChildEnv carries a footprintRequest (JSON) to the re-executed
// test binary, which then generates once and writes a footprintReport.
const footprintChildEnv = "NVMAI_FOOTPRINT_CHILD"

// pageCacheSlack is what bounded reads may leave cached: nothing with
// O_DIRECT; a probe block or two with the drop-behind fallbacks.
const pageCacheSlack = 64 << 10

type footprintRequest struct {
	Dir    string `json:"dir"`
	Slots  int    `json:"slots"`
	Tokens int    `json:"tokens"`
	Out    string `json:"out"`
}

type footprintReport struct {
	StartHWM int64         `json:"start_hwm"` // VmHWM before Load: runtime and test binary
	PeakRSS  int64         `json:"peak_rss"`  // VmHWM after generating
	RSSAnon  int64         `json:"rss_anon"`  // at the end: slots, heap, KV
	RSSFile  int64         `json:"rss_file"`  // at the end: binary text, mapped resident.bin
	Experts  *ExpertReport `json:"experts"`
}

// On a synthetic MoE install whose experts are 4× the budget, a generation
// run in its own process (so VmHWM is that run's alone) leaves the expert
// files out of the page cache with bounded reads, while buffered reads
// cache them; and its peak RSS stays within resident bytes + budget + KV +
// footprintOverhead. The tiny model makes the RSS bound mostly about the
// overhead; scripts/footprint.sh measures the same bound at full width.
func TestFootprintWithinBudget(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny-moe-4bit")
	res, err := convert.Synth(context.Background(), convert.SynthOptions{Geometry: "tiny-moe", Bits: 4, Output: dir, Seed: 7, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	x := m.Experts
	files := make([]string, len(x.Layers))
	for i, l := range x.Layers {
		files[i] = filepath.Join(dir, filepath.FromSlash(l.File))
	}
	total := int64(len(files)) * int64(x.Count) * x.Stride
	slots := x.TopK
	budget := int64(slots) * x.Stride * int64(len(files))
	if total < 4*budget {
		t.Fatalf("the experts (%d bytes) must be at least 4× the budget (%d); the tiny-moe geometry changed", total, budget)
	}

	dropCached(t, files)
	if before := cachedBytes(t, files); before > pageCacheSlack {
		t.Skipf("FADV_DONTNEED left %d of %d expert bytes cached; page-cache residency cannot be measured here", before, total)
	}
	bounded := runFootprintChild(t, dir, slots, true)
	afterBounded := cachedBytes(t, files)
	t.Logf("bounded (%s): read %d bytes (experts %d, budget %d); %d expert bytes in the page cache afterwards",
		bounded.Experts.IOMode, bounded.Experts.BytesRead, total, bounded.Experts.BudgetBytes, afterBounded)
	if bounded.Experts.BytesRead < total {
		t.Fatalf("the run read %d bytes, less than the %d bytes of all experts; it does not stress the budget", bounded.Experts.BytesRead, total)
	}
	if afterBounded > pageCacheSlack {
		t.Errorf("bounded reads (%s) left %d of %d expert bytes in the page cache, more than %d", bounded.Experts.IOMode, afterBounded, total, pageCacheSlack)
	}

	dropCached(t, files)
	buffered := runFootprintChild(t, dir, slots, false)
	afterBuffered := cachedBytes(t, files)
	t.Logf("buffered (%s): read %d bytes; %d expert bytes in the page cache afterwards", buffered.Experts.IOMode, buffered.Experts.BytesRead, afterBuffered)
	if afterBuffered < 2*budget {
		t.Errorf("buffered reads left only %d expert bytes in the page cache, want at least twice the %d-byte budget; the measurement cannot tell the modes apart", afterBuffered, budget)
	}

	checkPeakRSS(t, dir, m, bounded)
}

// checkPeakRSS compares the child's VmHWM with resident + budget + KV +
// footprintOverhead.
func checkPeakRSS(t *testing.T, dir string, m *packexperts.Manifest, r footprintReport) {
	t.Helper()
	st, err := os.Stat(filepath.Join(dir, packexperts.ResidentFile))
	if err != nil {
		t.Fatal(err)
	}
	resident := st.Size()
	kv, err := kvBytes(m, qwen35.DefaultKVInitial)
	if err != nil {
		t.Fatal(err)
	}
	accounted := resident + r.Experts.BudgetBytes + kv
	predicted := accounted + footprintOverhead
	t.Logf("peak RSS %s (at start %s; at end anon %s, file %s); resident %s + budget %s + KV %s = %s, beyond that %s; bound %s",
		mib(r.PeakRSS), mib(r.StartHWM), mib(r.RSSAnon), mib(r.RSSFile), mib(resident), mib(r.Experts.BudgetBytes), mib(kv),
		mib(accounted), mib(r.PeakRSS-accounted), mib(predicted))
	if raceEnabled {
		t.Log("race detector on: its shadow memory inflates RSS, so the bound is not checked")
		return
	}
	if r.PeakRSS > predicted {
		t.Errorf("peak RSS %d bytes exceeds resident %d + budget %d + KV %d + overhead %d = %d",
			r.PeakRSS, resident, r.Experts.BudgetBytes, kv, footprintOverhead, predicted)
	}
}

// kvBytes is the sequence state a session allocates up front: K and V of
// every full-attention layer for min(kvTokens, max context) tokens, and
// the conv window and recurrent matrix of every Gated DeltaNet layer, all
// float32 (qwen35.NewState).
func kvBytes(m *packexperts.Manifest, kvTokens int) (int64, error) {
	c, err := qwen35.ConfigFromGeometry(m.Architecture, m.Geometry)
	if err != nil {
		return 0, err
	}
	return c.StateBytes(kvTokens), nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// runFootprintChild re-executes the test binary to generate once from dir
// with slots per layer, bounded or buffered reads, and returns its report.
func runFootprintChild(t *testing.T, dir string, slots int, bounded bool) footprintReport {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report.json")
	req, err := json.Marshal(footprintRequest{Dir: dir, Slots: slots, Tokens: 16, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	io := "1"
	if !bounded {
		io = "0"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFootprintChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), footprintChildEnv+"="+string(req), expertcache.BoundedIOEnv+"="+io)
	if text, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("footprint child (bounded=%v): %v\n%s", bounded, err, text)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("footprint child wrote no report: %v", err)
	}
	var r footprintReport
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("footprint child report %s: %v", out, err)
	}
	if r.Experts == nil {
		t.Fatal("footprint child report has no expert statistics")
	}
	return r
}

// TestFootprintChildProcess is the generating half of
// TestFootprintWithinBudget; run directly it skips.
func TestFootprintChildProcess(t *testing.T) {
	raw := os.Getenv(footprintChildEnv)
	if raw == "" {
		t.Skip("helper process for TestFootprintWithinBudget")
	}
	var req footprintRequest
	if err := json.Unmarshal([]byte(raw), &req); err != nil {
		t.Fatalf("%s: %v", footprintChildEnv, err)
	}
	start, err := procStatus()
	if err != nil {
		t.Fatal(err)
	}
	e, err := Load(req.Dir, Options{Threads: 2, Experts: ExpertOptions{Slots: req.Slots, IOThreads: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := make([]int, 48)
	for i := range prompt {
		prompt[i] = rng.IntN(4096) // byte-level tokens of the synthetic tokenizer
	}
	res, err := e.NewSession(SessionOptions{}).Generate(context.Background(), prompt,
		GenerateOptions{MaxTokens: req.Tokens, IgnoreEOS: true, Sampling: sample.Params{TopP: 1}})
	if err != nil {
		t.Fatal(err)
	}
	end, err := procStatus()
	if err != nil {
		t.Fatal(err)
	}
	report := footprintReport{StartHWM: start["VmHWM"], PeakRSS: end["VmHWM"], RSSAnon: end["RssAnon"], RSSFile: end["RssFile"], Experts: res.Experts}
	b, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(req.Out, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

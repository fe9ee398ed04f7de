package server_test

// The server over the GPU engine (nvmai-run serve --engine gpu). These
// tests run where a GPU is usable and skip elsewhere with one line; with
// NVMAI_GPU=1 a missing GPU fails them (scripts/gpu-serve-check.sh sets
// it). Like pkg/gpu's tests they take the tiny fixture from
// $NVMAI_GPU_FIXTURES when set, else the embedded copy in testdata.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/chatparse"
	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/cuda/cudatest"
	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/promptcache"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/sample"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/modeldir"

	_ "github.com/nvmai/nvmai/pkg/gpu" // registers the gpu device
)

// onCPU says the tests serve the CPU engine instead
// (NVMAI_SERVE_TEST_DEVICE=cpu): the same checks, but for the device
// memory and the CPU server beside the GPU's, run without a GPU, so that
// the tests themselves are checked where they are written.
func onCPU() bool { return os.Getenv("NVMAI_SERVE_TEST_DEVICE") == model.CPU }

func testDevice() string {
	if onCPU() {
		return model.CPU
	}
	return model.GPU
}

// needGPU skips unless a GPU is usable (or onCPU); NVMAI_GPU=1 turns the
// skip into a failure.
func needGPU(t *testing.T) {
	t.Helper()
	if onCPU() {
		return
	}
	cudatest.Need(t)
}

// gpuTinyInstall converts tiny-moe-fused at 8 bits (once per test binary).
func gpuTinyInstall(t *testing.T) string {
	t.Helper()
	src := testfix.Embedded(t)
	if d := os.Getenv("NVMAI_GPU_FIXTURES"); d != "" {
		if p := filepath.Join(d, "tiny-moe-fused"); dirExists(p) {
			src = p
		}
	}
	return fixinstall.Install(t, src, 8)
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func loadGPU(t *testing.T, dir string) *runtime.Engine {
	t.Helper()
	e, err := runtime.Load(dir, runtime.Options{Device: testDevice(), Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// recorder is the served engine as the core sees it; it keeps what the
// last generation asked for and the text of each token it served.
type recorder struct {
	*server.RuntimeEngine
	g      server.Generation
	pieces []string
	out    server.Outcome
}

func (r *recorder) Generate(ctx context.Context, g server.Generation, onToken func(string) bool) (server.Outcome, error) {
	r.g, r.pieces = g, nil
	out, err := r.RuntimeEngine.Generate(ctx, g, func(s string) bool {
		r.pieces = append(r.pieces, s)
		return onToken(s)
	})
	r.out = out
	return out, err
}

// reference generates g on a fresh session of e, as nvmai-run does: one
// Generate over the whole prompt, stopping where the server stops (the
// end-of-sequence ids and <|im_end|>). It returns each token's text and
// the token count.
func reference(t *testing.T, e *runtime.Engine, g server.Generation) ([]string, int) {
	t.Helper()
	stops := slices.Clone(e.EOSIDs())
	if id, ok := e.Tokenizer.TokenID("<|im_end|>"); ok && !slices.Contains(stops, id) {
		stops = append(stops, id)
	}
	s := e.NewSession(runtime.SessionOptions{KVBits: model.KVFloat32})
	defer s.Close()
	var pieces []string
	res, err := s.Generate(context.Background(), g.Prompt, runtime.GenerateOptions{MaxTokens: g.MaxTokens, Sampling: g.Sampling, StopIDs: stops,
		OnToken: func(id int, text string) {
			if id >= 0 { // the stream decoder's flush is no token
				pieces = append(pieces, text)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	return pieces, len(res.IDs)
}

type gpuCore struct {
	s   *server.Server
	rec *recorder
}

func newGPUCore(e *runtime.Engine, opt server.RuntimeOptions) *gpuCore {
	opt.ModelID, opt.KVBits = "tiny", model.KVFloat32
	rec := &recorder{RuntimeEngine: server.NewRuntimeEngine(e, opt)}
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(rec, server.PlainChatML{})
	return &gpuCore{s: s, rec: rec}
}

func (c *gpuCore) chat(ctx context.Context, req server.ChatRequest) (*server.ChatResult, error) {
	job, err := c.s.PrepareChat(&req)
	if err != nil {
		return nil, err
	}
	return job.RunChat(ctx, nil)
}

// served sends req and checks that the tokens served are the reference's
// for the same prompt and sampling, on reference engine ref.
func (c *gpuCore) served(t *testing.T, ref *runtime.Engine, name string, req server.ChatRequest) *server.ChatResult {
	t.Helper()
	res, err := c.chat(context.Background(), req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	want, n := reference(t, ref, c.rec.g)
	if !slices.Equal(c.rec.pieces, want) || c.rec.out.CompletionTokens != n {
		t.Fatalf("%s: served %d tokens %q; a cold runtime session on the GPU generates %d: %q", name, c.rec.out.CompletionTokens, c.rec.pieces, n, want)
	}
	t.Logf("%s: %d tokens equal the runtime's, %d of %d prompt tokens from the prompt cache", name, n, res.Usage.CachedTokens, res.Usage.PromptTokens)
	return res
}

var (
	greedyGPU = sample.Params{}
	seededGPU = sample.Params{Temperature: 0.8, TopK: 20, TopP: 0.95, Seed: 7}
)

func gpuChat(msgs []chattemplate.Message, p sample.Params) server.ChatRequest {
	return server.ChatRequest{Messages: msgs, Sampling: p, MaxTokens: 24}
}

func conversation() (turn1 []chattemplate.Message, turn2 func(reply string) []chattemplate.Message) {
	turn1 = []chattemplate.Message{
		{Role: "system", Content: "You are a helpful assistant. You answer in a few words, and you never make anything up."},
		{Role: "user", Content: "Tell me about Paris."},
	}
	return turn1, func(reply string) []chattemplate.Message {
		return append(slices.Clone(turn1), chattemplate.Message{Role: "assistant", Content: reply}, chattemplate.Message{Role: "user", Content: "And Berlin?"})
	}
}

// deviceFree is the device's free memory (0 onCPU).
func deviceFree(t *testing.T) uint64 {
	t.Helper()
	if onCPU() {
		return 0
	}
	dev, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	var free uint64
	if err := dev.Do(func(c *cuda.Ctx) error { f, _, err := c.MemInfo(); free = f; return err }); err != nil {
		t.Fatal(err)
	}
	return free
}

// Served tokens equal the runtime's for the same prompt and seed, greedy
// and sampled, cold and resumed from the RAM prompt cache (from a
// boundary, the end of a prompt and the end of a reply, live or after
// another conversation), after a cancelled request, under a JSON
// constraint, with and without the snapshot gap serve uses on the GPU.
// A second round of the same requests leaves the device's free memory
// where the first left it.
func TestGPUServedTokensEqualTheRuntimes(t *testing.T) {
	needGPU(t)
	e := loadGPU(t, gpuTinyInstall(t))
	turn1, turn2 := conversation()
	for _, gap := range []int{0, 64} {
		c := newGPUCore(e, server.RuntimeOptions{CacheBytes: 256 << 20, SnapshotGap: gap})
		var before uint64
		for round := range 2 {
			if round == 1 {
				before = deviceFree(t)
			}
			name := func(s string) string { return s + map[int]string{0: "", 64: " (gap 64)"}[gap] }
			r1 := c.served(t, e, name("turn 1 greedy"), gpuChat(turn1, greedyGPU))
			c.served(t, e, name("turn 1 seeded"), gpuChat(turn1, seededGPU))
			again := c.served(t, e, name("turn 1 greedy again"), gpuChat(turn1, greedyGPU))
			if gap == 0 && again.Usage.CachedTokens != again.Usage.PromptTokens-1 {
				t.Errorf("the same prompt again reused %d of %d tokens", again.Usage.CachedTokens, again.Usage.PromptTokens)
			}
			r2 := c.served(t, e, name("turn 2 greedy"), gpuChat(turn2(r1.Content), greedyGPU))
			// Under the gap the first round's short prompts left no
			// snapshot turn 2 can use (the reply re-renders to other
			// tokens than were sampled); the second finds turn 2's own.
			if r2.Usage.CachedTokens == 0 && (gap == 0 || round == 1) {
				t.Errorf("the second turn reused nothing")
			}
			c.served(t, e, name("turn 2 seeded"), gpuChat(turn2(r1.Content), seededGPU))
			c.served(t, e, name("another conversation"), gpuChat([]chattemplate.Message{{Role: "user", Content: "Write a haiku."}}, seededGPU))
			r2 = c.served(t, e, name("turn 2 greedy after another conversation"), gpuChat(turn2(r1.Content), greedyGPU))
			if r2.Usage.CachedTokens == 0 {
				t.Errorf("the second turn after another conversation reused nothing")
			}

			// A client that goes away mid-reply: the engine stops and the
			// next request is served as before.
			ctx, cancel := context.WithCancel(context.Background())
			job, err := c.s.PrepareChat(&server.ChatRequest{Messages: turn2(r1.Content), MaxTokens: 24, Sampling: seededGPU})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := job.RunChat(ctx, func(chatparse.Event) { cancel() }); err == nil && len(c.rec.pieces) > 1 {
				t.Errorf("a request whose client went away after its first token ran on for %d tokens", len(c.rec.pieces))
			}
			cancel()
			c.served(t, e, name("turn 2 after a cancelled request"), gpuChat(turn2(r1.Content), seededGPU))

			schema, err := jsonconstrain.Compile(json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`))
			if err != nil {
				t.Fatal(err)
			}
			jr := gpuChat([]chattemplate.Message{{Role: "user", Content: "Name a city as JSON."}}, greedyGPU)
			jr.Format, jr.MaxTokens = schema, 48
			res, err := c.chat(context.Background(), jr)
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if res.Finish != "length" && json.Unmarshal([]byte(res.Content), &v) != nil {
				t.Errorf("constrained reply %q (%s) is not JSON", res.Content, res.Finish)
			}
		}
		after := deviceFree(t)
		if after+2<<20 < before {
			t.Errorf("gap %d: the second round of requests left %d MiB less device memory free (%d → %d MiB)", gap, (before-after)>>20, before>>20, after>>20)
		}
		c.rec.Close()
	}
}

// The disk prompt cache on the GPU: a restarted core (a fresh engine and
// disk cache over the same directory) resumes the second turn from the
// snapshots the first core wrote and serves the runtime's tokens; a CPU
// server at the same KV width over that directory neither resumes nor
// deletes them (the disk key names the engine), and --models-dir loads the
// install on the GPU and serves the same reply.
func TestGPUServeDiskCacheSurvivesRestart(t *testing.T) {
	needGPU(t)
	dir := gpuTinyInstall(t)
	e := loadGPU(t, dir)
	turn1, turn2 := conversation()
	cacheDir := t.TempDir()
	openDisk := func() *promptcache.Disk {
		d, err := promptcache.OpenDisk(promptcache.DiskOptions{Dir: cacheDir, Budget: 1 << 30, Log: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		return d
	}
	diskOpt := func(d *promptcache.Disk) server.RuntimeOptions {
		return server.RuntimeOptions{Disk: d, TemplateSHA256: server.PlainChatMLSHA256(), DiskMinTokens: 8}
	}

	d1 := openDisk()
	c1 := newGPUCore(e, diskOpt(d1))
	r1 := c1.served(t, e, "turn 1, first server", gpuChat(turn1, greedyGPU))
	d1.Close() // the queued writes finish
	c1.rec.Close()
	entries, _ := filepath.Glob(filepath.Join(cacheDir, "*.nvpc"))
	if len(entries) == 0 {
		t.Fatal("the first server wrote no snapshot to disk")
	}

	e2 := loadGPU(t, dir)
	d2 := openDisk()
	c2 := newGPUCore(e2, diskOpt(d2))
	for _, p := range []sample.Params{greedyGPU, seededGPU} {
		res := c2.served(t, e, "turn 2 after a restart", gpuChat(turn2(r1.Content), p))
		if res.Usage.CachedTokens == 0 {
			t.Fatalf("the restarted server resumed nothing from disk")
		}
	}
	if st := c2.rec.DiskCacheStats(); st.Hits == 0 || st.Corrupt != 0 {
		t.Errorf("disk stats after the restart: %+v", st)
	}
	d2.Close()
	c2.rec.Close()

	if onCPU() {
		t.Log("NVMAI_SERVE_TEST_DEVICE=cpu: no CPU server beside the GPU's to check")
		testModelsDir(t, dir, r1)
		return
	}
	cpu, err := runtime.Load(dir, runtime.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	d3 := openDisk()
	opt := diskOpt(d3)
	opt.KVBits = model.KVFloat32
	re := server.NewRuntimeEngine(cpu, opt)
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(re, server.PlainChatML{})
	res := runChat(t, s, &server.ChatRequest{Messages: turn2(r1.Content), MaxTokens: 8})
	if res.Usage.CachedTokens != 0 {
		t.Errorf("a CPU server resumed %d tokens from the GPU server's snapshots", res.Usage.CachedTokens)
	}
	if st := re.DiskCacheStats(); st.Corrupt != 0 {
		t.Errorf("a CPU server read the GPU server's snapshots as damaged: %+v", st)
	}
	d3.Close()
	re.Close()
	for _, p := range entries {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("a GPU snapshot is gone after the CPU server ran: %v", err)
		}
	}

	testModelsDir(t, dir, r1)
}

// testModelsDir: --models-dir with the GPU engine loads the install on
// the device and serves what the single-model server served (r1).
func testModelsDir(t *testing.T, dir string, r1 *server.ChatResult) {
	turn1, _ := conversation()
	set, err := modeldir.Open(modeldir.Options{Dir: filepath.Dir(dir), Load: runtime.Options{Device: testDevice(), Threads: 2},
		Runtime: server.RuntimeOptions{KVBits: model.KVFloat32, CacheBytes: 64 << 20, SnapshotGap: 64}, Notice: func(s string) { t.Log(s) }})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	ms := server.New(server.Config{Log: func(server.RequestLog) {}})
	if err := ms.SetModels(set, 0); err != nil {
		t.Fatal(err)
	}
	id := set.List()[0].ID
	job, err := ms.PrepareChat(&server.ChatRequest{Model: id, Messages: turn1, MaxTokens: 24})
	if err != nil {
		t.Fatal(err)
	}
	got, err := job.RunChat(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Content != r1.Content || got.Usage.CompletionTokens != r1.Usage.CompletionTokens {
		t.Errorf("--models-dir on the GPU: %q (%d tokens), want %q (%d)", got.Content, got.Usage.CompletionTokens, r1.Content, r1.Usage.CompletionTokens)
	}
}

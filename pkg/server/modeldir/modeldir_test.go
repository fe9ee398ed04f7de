package modeldir

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	oai "github.com/openai/openai-go/v3"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/openai"
)

// models converts the two tiny fixtures at 16 bits (where greedy output is
// transformers' own) into root/org/moe and root/dense.
func models(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, m := range []struct{ snapshot, dir string }{{"tiny-moe-fused", "org/moe"}, {"tiny-dense", "dense"}} {
		_, err := convert.Run(context.Background(), convert.Options{Input: testfix.Shared(t, "dev/"+m.snapshot),
			Targets: []convert.Target{{Bits: 16, Dir: filepath.Join(root, filepath.FromSlash(m.dir))}}, Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

type notices struct {
	mu    sync.Mutex
	lines []string
}

func (n *notices) add(line string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lines = append(n.lines, line)
}

func (n *notices) count(sub string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, l := range n.lines {
		if strings.Contains(l, sub) {
			c++
		}
	}
	return c
}

// greedyRef is the first prompt of a fixture's references and transformers'
// greedy continuation up to the first end of sequence.
func greedyRef(t *testing.T, refs string) (prompt, want string) {
	t.Helper()
	raw, err := os.ReadFile(testfix.Shared(t, "dev/"+refs))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Prompts []struct {
			Text       string `json:"text"`
			GreedyText string `json:"greedy_text"`
		} `json:"prompts"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	p := r.Prompts[0]
	want, _, _ = strings.Cut(p.GreedyText, "<|endoftext|>")
	want, _, _ = strings.Cut(want, "<|im_end|>")
	return p.Text, want
}

// TestTwoFixtureInstalls serves two real installs and switches between
// them through the OpenAI Go SDK: /v1/models lists both, each answers with
// transformers' greedy continuation, an unknown model is a 404
// model_not_found naming both, and a switch back does not hash the
// install again.
func TestTwoFixtureInstalls(t *testing.T) {
	root := models(t)
	log := &notices{}
	set, err := Open(Options{Dir: root, Load: runtime.Options{Threads: 2}, Notice: log.add, Runtime: server.RuntimeOptions{PrefillChunk: 16}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	s := server.New(server.Config{Log: func(server.RequestLog) {}, Notice: log.add})
	if err := s.SetModels(set, 0); err != nil {
		t.Fatal(err)
	}
	h := httpapi.New(s, httpapi.Options{})
	openai.New(s, openai.Options{}).Mount(h)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	client := adaptertest.OpenAIClient(hs, "k")
	ctx := context.Background()

	page, err := client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{"dense", "org/moe"}) {
		t.Fatalf("/v1/models lists %v", ids)
	}

	refs := map[string]string{"org/moe": "tiny-moe.refs.json", "dense": "tiny-dense.refs.json"}
	for _, id := range []string{"org/moe", "dense", "org/moe"} {
		prompt, want := greedyRef(t, refs[id])
		res, err := client.Completions.New(ctx, oai.CompletionNewParams{
			Model: oai.CompletionNewParamsModel(id), Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String(prompt)},
			MaxTokens: oai.Int(16), Temperature: oai.Float(0),
		})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		t.Logf("%s: %q (transformers %q)", id, res.Choices[0].Text, want)
		if res.Model != id || !strings.HasPrefix(want, res.Choices[0].Text) || res.Choices[0].Text == "" {
			t.Errorf("%s: model %q text %q; transformers continues with %q", id, res.Model, res.Choices[0].Text, want)
		}
		if s.Loaded() != id {
			t.Errorf("loaded %q after a request for %s", s.Loaded(), id)
		}
	}
	chat, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "dense", MaxTokens: oai.Int(4),
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	if err != nil || chat.Model != "dense" {
		t.Fatalf("chat on dense: %v, %+v", err, chat)
	}

	_, err = client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "gpt-4o", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" ||
		!strings.Contains(apiErr.Message, "dense, org/moe") {
		t.Errorf("unknown model: %v", err)
	}
	for id, want := range map[string]int{"org/moe": 2, "dense": 2} {
		if n := log.count("model " + id + " loaded"); n != want {
			t.Errorf("%s: loaded %d times, want %d", id, n, want)
		}
	}
	if n := log.count("files match their receipt"); n != 2 {
		t.Errorf("the receipt checked %d times for 2 installs over 4 loads; want once each: %q", n, log.lines)
	}
}

// TestListingAndLoadChecks: an install whose receipt does not name its
// manifest is listed nowhere and logged once; one whose payload changed
// with the same size is listed (sizes match) but fails its first load
// with the sha256 named, and the other model keeps serving.
func TestListingAndLoadChecks(t *testing.T) {
	root := models(t)
	testfix.CopyTree(t, filepath.Join(root, "dense"), filepath.Join(root, "stale"))
	testfix.CopyTree(t, filepath.Join(root, "dense"), filepath.Join(root, "flipped"))
	writeTo(t, filepath.Join(root, "stale", packexperts.ManifestFile), func(b []byte) []byte { return append(b, ' ') })
	writeTo(t, filepath.Join(root, "flipped", packexperts.ResidentFile), func(b []byte) []byte { b[len(b)/2] ^= 1; return b })
	if err := os.MkdirAll(filepath.Join(root, ".staging", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	log := &notices{}
	set, err := Open(Options{Dir: root, Load: runtime.Options{Threads: 1}, Notice: log.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	var ids []string
	for _, m := range set.List() {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{"dense", "flipped", "org/moe"}) {
		t.Errorf("listed %v", ids)
	}
	if n := log.count("stale is not served: the receipt is for another manifest"); n != 1 {
		t.Errorf("the stale install logged %d times: %q", n, log.lines)
	}
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	if err := s.SetModels(set, 0); err != nil {
		t.Fatal(err)
	}
	j, err := s.PrepareCompletion(&server.CompletionRequest{Model: "flipped", Prompt: "Once upon a", MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	var se *server.Error
	if _, err := j.RunCompletion(context.Background(), nil); !errors.As(err, &se) || se.Kind != server.KindInternal || !strings.Contains(se.Msg, "resident.bin: expected sha256") {
		t.Errorf("flipped install: %v", err)
	}
	j, err = s.PrepareCompletion(&server.CompletionRequest{Model: "dense", Prompt: "Once upon a", MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := j.RunCompletion(context.Background(), nil); err != nil || res.Usage.CompletionTokens == 0 {
		t.Errorf("dense after the failure: %v, %v", res, err)
	}
	if _, err := Open(Options{Dir: filepath.Join(root, "none")}); err == nil {
		t.Error("a missing directory opened")
	}
	if _, err := Open(Options{Dir: filepath.Join(root, ".staging")}); err == nil || !strings.Contains(err.Error(), "no verified nvmai install") {
		t.Errorf("a directory with no install: %v", err)
	}
}

func writeTo(t *testing.T, p string, edit func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, edit(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

package openai

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/server"
)

// End to end on a synthetic qwen4_exp install, which carries the Qwen3.8
// template: the install's renderer is that template, reasoning_effort
// reaches it, and a second turn that returns the first reply's
// reasoning_content renders it back after the first prompt.
func TestSyntheticQwen38ServesEffortAndRendersReasoningBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q38")
	if _, err := convert.Synth(context.Background(), convert.SynthOptions{Geometry: "tiny-qwen38", Bits: 8, Output: dir, Seed: 2, Threads: 1}); err != nil {
		t.Fatal(err)
	}
	e, err := runtime.Load(dir, runtime.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	r, err := server.InstallRenderer(e)
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(server.NewRuntimeEngine(e, server.RuntimeOptions{ModelID: "q38", CacheBytes: 64 << 20, PrefillChunk: 16}), r)
	hs := httptest.NewServer(host(s))
	t.Cleanup(hs.Close)
	post := func(path, body string) map[string]any {
		t.Helper()
		resp, err := hs.Client().Post(hs.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %v %v", path, body, resp.StatusCode, err, out)
		}
		return out
	}
	p := post("/apply-template", `{"reasoning_effort":"low","messages":[{"role":"user","content":"Hi"}]}`)["prompt"].(string)
	if want := "<|im_start|>system\nReasoning effort is set to low. Keep your thinking brief and answer directly.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"; p != want {
		t.Fatalf("prompt %q, want %q", p, want)
	}
	first := `{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}`
	r1 := post("/v1/chat/completions", `{"temperature":0,"max_tokens":12,"reasoning_effort":"low","messages":[`+first+`]}`)
	msg := r1["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	reasoning, _ := msg["reasoning_content"].(string)
	content, _ := msg["content"].(string)
	if strings.TrimSpace(reasoning) == "" {
		t.Fatalf("first reply has no reasoning: %v", msg)
	}
	prompt1 := int(r1["usage"].(map[string]any)["prompt_tokens"].(float64))
	back, _ := json.Marshal(map[string]any{"role": "assistant", "content": content, "reasoning_content": reasoning})
	second := `"reasoning_effort":"low","messages":[` + first + `,` + string(back) + `,{"role":"user","content":"More?"}]`
	// The second prompt continues the first one's text with the reply's
	// reasoning. (Token reuse past the first prompt needs the re-encoded
	// reply to equal the sampled ids, which a random-weight model's
	// arbitrary tokens seldom do, so it is not asserted here.)
	p1 := post("/apply-template", `{"reasoning_effort":"low","messages":[`+first+`]}`)["prompt"].(string)
	p2 := post("/apply-template", `{`+second+`}`)["prompt"].(string)
	if !strings.HasPrefix(p2, p1) || !strings.Contains(p2, "<think>\n"+strings.TrimSpace(reasoning)+"\n</think>\n\n") {
		t.Errorf("second prompt %q does not continue the first %q with the reply's reasoning", p2, p1)
	}
	r2 := post("/v1/chat/completions", `{"temperature":0,"max_tokens":4,`+second+`}`)
	u := r2["usage"].(map[string]any)
	if cached := int(u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)); cached < prompt1-1 {
		t.Errorf("second turn reused %d cached tokens, want at least the first prompt's %d less its last", cached, prompt1)
	}
}

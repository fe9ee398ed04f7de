package openai

import (
	"testing"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// The server's defaults (serve --temperature, --top-k, --seed, --max-tokens)
// fill what a request leaves out, and the request's own fields win.
func TestServerDefaultsFillWhatTheRequestLeavesOut(t *testing.T) {
	temp, topK, seed := 0.25, 5, uint64(77)
	eng := &servertest.Engine{Context: 512, Script: script("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t")}
	h := newHarness(t, eng, hostOptions{}, server.Config{Defaults: server.Defaults{MaxTokens: 4, Temperature: &temp, TopK: &topK, Seed: &seed}})
	cases := []struct {
		path, body string
		temp       float64
		topK       int
		seed       uint64
		max        int
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 0.25, 5, 77, 4},
		{"/v1/chat/completions", `{"temperature":0.9,"top_k":2,"seed":3,"max_tokens":2,"messages":[{"role":"user","content":"x"}]}`, 0.9, 2, 3, 2},
		{"/v1/completions", `{"prompt":"x"}`, 0.25, 5, 77, 4}, // --max-tokens wins over OpenAI's 16
		{"/v1/completions", `{"prompt":"x","max_tokens":50}`, 0.25, 5, 77, 4},
	}
	for i, tc := range cases {
		status, _, body := h.post(tc.path, "application/json", tc.body)
		if status != 200 {
			t.Fatalf("%s %s: %d %s", tc.path, tc.body, status, body)
		}
		g := eng.Generations()[i]
		if g.Sampling.Temperature != tc.temp || g.Sampling.TopK != tc.topK || g.Sampling.Seed != tc.seed || g.MaxTokens != tc.max {
			t.Errorf("%s %s: sampling %+v max %d; want temperature %v top_k %d seed %d max %d", tc.path, tc.body, g.Sampling, g.MaxTokens, tc.temp, tc.topK, tc.seed, tc.max)
		}
	}
}

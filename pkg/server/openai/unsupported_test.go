package openai

import (
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// A field this server cannot honour is refused by name, never silently
// ignored, and out-of-range sampling knobs are refused rather than turned
// off (#44 S4, S16); the defaults clients send pass.
func TestUnhonourableFieldsAreRefusedByName(t *testing.T) {
	h := newHarness(t, &servertest.Engine{Context: 128, Script: script("ok")}, hostOptions{}, server.Config{})
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	cases := []struct {
		name, path, body string
		param            string // "" means the request must succeed
	}{
		{"chat logit_bias", "/v1/chat/completions", `{"logit_bias":{"1":100},` + msgs + `}`, "logit_bias"},
		{"completion logit_bias", "/v1/completions", `{"prompt":"x","logit_bias":{"1":100}}`, "logit_bias"},
		{"best_of 2", "/v1/completions", `{"prompt":"x","best_of":2}`, "best_of"},
		{"suffix", "/v1/completions", `{"prompt":"x","suffix":"end"}`, "suffix"},
		{"echo", "/v1/completions", `{"prompt":"x","echo":true}`, "echo"},
		{"top_logprobs", "/v1/chat/completions", `{"top_logprobs":3,` + msgs + `}`, "top_logprobs"},
		{"legacy functions", "/v1/chat/completions", `{"functions":[{"name":"f"}],` + msgs + `}`, "functions"},
		{"legacy named function_call", "/v1/chat/completions", `{"function_call":{"name":"f"},` + msgs + `}`, "function_call"},
		{"audio", "/v1/chat/completions", `{"audio":{"voice":"alloy","format":"wav"},` + msgs + `}`, "audio"},
		{"audio modality", "/v1/chat/completions", `{"modalities":["text","audio"],` + msgs + `}`, "modalities[1]"},
		{"repetition_penalty 0", "/v1/chat/completions", `{"repetition_penalty":0,` + msgs + `}`, "repetition_penalty"},
		{"repetition_penalty negative", "/v1/completions", `{"prompt":"x","repetition_penalty":-1}`, "repetition_penalty"},
		{"top_k -5", "/v1/chat/completions", `{"top_k":-5,` + msgs + `}`, "top_k"},
		{"top_k -2 on completions", "/v1/completions", `{"prompt":"x","top_k":-2}`, "top_k"},

		{"empty logit_bias passes", "/v1/chat/completions", `{"logit_bias":{},` + msgs + `}`, ""},
		{"null logit_bias passes", "/v1/completions", `{"prompt":"x","logit_bias":null}`, ""},
		{"best_of 1 passes", "/v1/completions", `{"prompt":"x","best_of":1}`, ""},
		{"empty suffix passes", "/v1/completions", `{"prompt":"x","suffix":""}`, ""},
		{"top_logprobs 0 passes", "/v1/chat/completions", `{"top_logprobs":0,` + msgs + `}`, ""},
		{"function_call auto passes", "/v1/chat/completions", `{"function_call":"auto","functions":[],` + msgs + `}`, ""},
		{"text modality passes", "/v1/chat/completions", `{"modalities":["text"],` + msgs + `}`, ""},
		{"top_k -1 is off", "/v1/chat/completions", `{"top_k":-1,` + msgs + `}`, ""},
		{"top_k 0 is off", "/v1/completions", `{"prompt":"x","top_k":0}`, ""},
		{"repetition_penalty 1 passes", "/v1/chat/completions", `{"repetition_penalty":1,` + msgs + `}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := h.post(tc.path, "application/json", tc.body)
			if tc.param == "" {
				if status != 200 {
					t.Fatalf("%d %s, want 200", status, body)
				}
				return
			}
			e := adaptertest.DecodeOpenAIError(t, body)
			field := strings.TrimSuffix(tc.param, "[1]")
			if status != 400 || e.Param == nil || *e.Param != tc.param || !strings.Contains(e.Message, field) {
				t.Fatalf("%d param %v %q, want 400 naming %s", status, e.Param, e.Message, tc.param)
			}
		})
	}
}

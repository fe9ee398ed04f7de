package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/sample"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// The tool-call constraint on the GPU engine: with tool_choice auto the
// free text is token for token the runtime's without a constraint (the
// constraint is idle there, so the device keeps sampling where the row
// is), and forced calls sampled at temperature 1 parse and validate
// (NVMAI_SERVE_TEST_DEVICE=cpu runs the same on the CPU engine).
func TestGPUToolConstraint(t *testing.T) {
	needGPU(t)
	e := loadGPU(t, gpuTinyInstall(t))
	rec := &recorder{RuntimeEngine: server.NewRuntimeEngine(e, server.RuntimeOptions{ModelID: "tiny", KVBits: model.KVFloat32})}
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(rec, servertest.Renderer{})
	var tools []json.RawMessage
	for _, tl := range adaptertest.OpenAITools() {
		raw, _ := json.Marshal(tl)
		tools = append(tools, raw)
	}
	off := false
	msgs := []chattemplate.Message{{Role: "user", Content: "Tell me about Paris."}}
	run := func(req server.ChatRequest) *server.ChatResult {
		t.Helper()
		job, err := s.PrepareChat(&req)
		if err != nil {
			t.Fatal(err)
		}
		res, err := job.RunChat(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, p := range []sample.Params{greedyGPU, seededGPU} {
		res := run(server.ChatRequest{Messages: msgs, Tools: tools, Thinking: &off, Sampling: p, MaxTokens: 32, ParallelToolCalls: true})
		if rec.g.Tools == nil {
			t.Fatal("a request with tools was not constrained")
		}
		if strings.Contains(strings.Join(rec.pieces, ""), "<tool_call>") {
			t.Logf("sampling %+v opened a call; text not compared", p)
			continue
		}
		want, n := reference(t, e, rec.g)
		if !slices.Equal(rec.pieces, want) || rec.out.CompletionTokens != n {
			t.Fatalf("sampling %+v: served %q under the idle constraint, the runtime without one %q", p, rec.pieces, want)
		}
		t.Logf("sampling %+v: %d tokens of free text equal the unconstrained runtime's (%q)", p, n, res.Content)
	}
	for seed := range 5 {
		choice, name := server.ToolRequired, ""
		if seed%2 == 1 {
			choice, name = server.ToolNamed, "write_file"
		}
		res := run(server.ChatRequest{Messages: msgs, Tools: tools, ToolChoice: choice, ToolName: name,
			Sampling: sample.Params{Temperature: 1, Seed: uint64(seed) + 1}, MaxTokens: 1500})
		if len(res.ToolCalls) == 0 {
			t.Fatalf("seed %d: no call in %q", seed, strings.Join(rec.pieces, ""))
		}
		for _, c := range res.ToolCalls { // a call cut by max_tokens is left out
			if err := adaptertest.CheckToolCall(c.Name, json.RawMessage(c.Arguments)); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		t.Logf("seed %d: %s", seed, fmt.Sprint(res.ToolCalls))
	}
}

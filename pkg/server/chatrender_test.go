package server_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// An in-process caller (nvmai-run chat) renders a conversation and splits
// a reply exactly as a request through the queue does: RenderChat is
// ApplyTemplate's prompt, and ParseReply is RunChat's content and
// reasoning, so the terminal chat and the server are one conversation layer.
func TestInProcessRenderingAndParsingAreTheCores(t *testing.T) {
	tmpl, err := chattemplate.Load(filepath.Join("..", "chattemplate", "testdata", "models", "qwen38"))
	if err != nil {
		t.Fatal(err)
	}
	reply := []string{"R", "\n</think>\n\n", "A"}
	eng := &servertest.Engine{Script: func(string) []string { return reply }}
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(eng, tmpl)
	reasoning := "earlier"
	msgs := []chattemplate.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "hello"},
		{Role: "assistant", Content: "hi", ReasoningContent: &reasoning},
		{Role: "user", Content: "again"},
	}
	for _, kwargs := range []map[string]any{nil, {"reasoning_effort": "low"}, {"reasoning_effort": "medium"}} {
		req := &server.ChatRequest{Messages: msgs, Kwargs: kwargs}
		want, err := s.ApplyTemplate(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := server.RenderChat(tmpl, req)
		if err != nil || got != want {
			t.Fatalf("kwargs %v: RenderChat %q, %v; ApplyTemplate %q", kwargs, got, err, want)
		}
		job, err := s.PrepareChat(req)
		if err != nil {
			t.Fatal(err)
		}
		res, err := job.RunChat(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		parsed := server.ParseReply(got, reply[0]+reply[1]+reply[2])
		if parsed.Reasoning != res.Reasoning || parsed.Content != res.Content || parsed.Reasoning == "" {
			t.Errorf("kwargs %v: ParseReply %+v, RunChat reasoning %q content %q", kwargs, parsed, res.Reasoning, res.Content)
		}
	}
	if _, err := server.RenderChat(tmpl, &server.ChatRequest{Messages: msgs, Kwargs: map[string]any{"reasoning_effort": "high"}}); err == nil {
		t.Error("RenderChat took a reasoning effort the template does not")
	}
}

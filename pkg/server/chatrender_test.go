package server_test

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// An in-process caller (nvmai-run chat) renders a conversation as a request
// through the queue does: RenderChat is ApplyTemplate's prompt, the
// reasoning effort included.
func TestRenderChatIsTheCoresPrompt(t *testing.T) {
	tmpl, err := chattemplate.Load(filepath.Join("..", "chattemplate", "testdata", "models", "qwen38"))
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(&servertest.Engine{}, tmpl)
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
		if got, err := server.RenderChat(tmpl, req); err != nil || got != want {
			t.Fatalf("kwargs %v: RenderChat %q, %v; ApplyTemplate %q", kwargs, got, err, want)
		}
	}
	if _, err := server.RenderChat(tmpl, &server.ChatRequest{Messages: msgs, Kwargs: map[string]any{"reasoning_effort": "high"}}); err == nil {
		t.Error("RenderChat took a reasoning effort the template does not")
	}
}

// A request's Tokenize hook (the chat's: the tokens its session holds,
// then the new text) gives the prompt the engine is asked for; its error
// refuses the request as it is and gives the queue place back.
func TestChatRequestTokenizeHook(t *testing.T) {
	eng := &servertest.Engine{Script: func(string) []string { return []string{"R", "\n</think>\n\n", "A"} }}
	s := server.New(server.Config{Log: func(server.RequestLog) {}, QueueLimit: 1})
	s.SetEngine(eng, servertest.Renderer{})
	var rendered string
	held := []int{7, 8, 9}
	req := &server.ChatRequest{Messages: userTurn("x"), Tokenize: func(p string) ([]int, error) {
		rendered = p
		return append(slices.Clone(held), 1, 2), nil
	}}
	res := runChat(t, s, req)
	gens := eng.Generations()
	if want := []int{7, 8, 9, 1, 2}; len(gens) != 1 || !slices.Equal(gens[0].Prompt, want) || res.Usage.PromptTokens != len(want) {
		t.Errorf("engine asked for %v (%d prompt tokens), want the hook's %v", gens, res.Usage.PromptTokens, want)
	}
	if want, _ := s.ApplyTemplate(&server.ChatRequest{Messages: userTurn("x")}); rendered != want {
		t.Errorf("the hook got %q, want the rendered prompt %q", rendered, want)
	}
	refusal := errors.New("not sent")
	req.Tokenize = func(string) ([]int, error) { return nil, refusal }
	for range 3 { // more than the queue holds: each refusal gives its place back
		if _, err := s.PrepareChat(req); !errors.Is(err, refusal) {
			t.Fatalf("PrepareChat: %v, want the hook's error", err)
		}
	}
}

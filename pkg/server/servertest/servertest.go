// Package servertest provides a scripted Engine and a small Qwen-style
// ChatML renderer, so the server and its protocol adapters are tested
// without a model.
package servertest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/server"
)

// Engine is a fake model: one token per character of the prompt, and
// output scripted per prompt as a list of token texts.
type Engine struct {
	Context int // default 4096
	// Script returns the tokens to emit for a prompt; default "Hello!" in
	// three tokens.
	Script       func(prompt string) []string
	TokenDelay   time.Duration
	PrefillDelay time.Duration

	running  atomic.Int32
	mu       sync.Mutex
	prompts  []string
	gens     []server.Generation
	maxAlive int32
}

// Info implements server.Engine.
func (e *Engine) Info() server.ModelInfo {
	c := e.Context
	if c == 0 {
		c = 4096
	}
	return server.ModelInfo{ID: "fake-model", Context: c, Budget: "0"}
}

// Tokenize implements server.Engine: one id per rune, up to limit+1.
func (e *Engine) Tokenize(text string, limit int) ([]int, bool) {
	ids := make([]int, 0, min(len(text), limit+1))
	for _, r := range text {
		if len(ids) > limit {
			return ids, true
		}
		ids = append(ids, int(r))
	}
	return ids, len(ids) > limit
}

// Generate implements server.Engine.
func (e *Engine) Generate(ctx context.Context, g server.Generation, onToken func(string) bool) (server.Outcome, error) {
	if n := e.running.Add(1); n > 1 {
		e.running.Add(-1)
		return server.Outcome{}, fmt.Errorf("servertest: %d generations at once", n)
	}
	defer e.running.Add(-1)
	prompt := decode(g.Prompt)
	e.mu.Lock()
	e.prompts = append(e.prompts, prompt)
	e.gens = append(e.gens, g)
	e.mu.Unlock()
	start := time.Now()
	if err := Sleep(ctx, e.PrefillDelay); err != nil {
		return server.Outcome{}, err
	}
	out := server.Outcome{Prefill: time.Since(start), Finish: server.FinishEOS}
	script := []string{"Hel", "lo", "!"}
	if e.Script != nil {
		script = e.Script(prompt)
	}
	for i, tok := range script {
		if i == g.MaxTokens {
			out.Finish = server.FinishLength
			break
		}
		if err := Sleep(ctx, e.TokenDelay); err != nil {
			return out, err
		}
		if i == 0 {
			out.FirstToken = time.Since(start)
		}
		out.CompletionTokens++
		if !onToken(tok) {
			out.Finish = server.FinishStopped
			break
		}
	}
	out.CompletionTokens++ // the EOS token, as a model would count it
	out.Decode = time.Since(start) - out.Prefill
	return out, nil
}

// Prompts returns the prompts generated from so far.
func (e *Engine) Prompts() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.prompts...)
}

// Generations returns the Generations asked for so far (the prompt, the
// sampling, the Format), so adapters can test what they map to the core.
func (e *Engine) Generations() []server.Generation {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]server.Generation(nil), e.gens...)
}

// Sleep waits d, or until ctx is done (its error); d ≤ 0 waits not at all.
// The scripted engine paces its tokens with it too.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteRune(rune(id))
	}
	return b.String()
}

// Renderer is a small Qwen3-style ChatML template: tools in the system
// turn, assistant tool calls in Qwen3-Coder XML, tool results as
// <tool_response> user turns, and a generation prompt that opens <think>
// unless enable_thinking is false. Like the real template it raises on a
// system message that is not first and on arguments that are not an object.
type Renderer struct{}

// Render implements server.Renderer.
func (Renderer) Render(in chattemplate.Input) (string, error) {
	if len(in.Messages) == 0 {
		return "", &chattemplate.RenderError{Msg: "No messages provided."}
	}
	var b strings.Builder
	msgs := in.Messages
	if len(in.Tools) > 0 {
		b.WriteString("<|im_start|>system\n# Tools\n<tools>")
		for _, t := range in.Tools {
			b.WriteString("\n" + string(t))
		}
		b.WriteString("\n</tools>")
		if msgs[0].Role == "system" {
			b.WriteString("\n\n" + msgs[0].Content)
			msgs = msgs[1:]
		}
		b.WriteString("<|im_end|>\n")
	}
	for i, m := range msgs {
		switch m.Role {
		case "system":
			if i > 0 || len(in.Tools) > 0 {
				return "", &chattemplate.RenderError{Msg: "System message must be at the beginning."}
			}
			fmt.Fprintf(&b, "<|im_start|>system\n%s<|im_end|>\n", content(m))
		case "user":
			fmt.Fprintf(&b, "<|im_start|>user\n%s<|im_end|>\n", content(m))
		case "assistant":
			b.WriteString("<|im_start|>assistant\n" + content(m))
			for _, tc := range m.ToolCalls {
				if err := writeCall(&b, tc); err != nil {
					return "", err
				}
			}
			b.WriteString("<|im_end|>\n")
		case "tool":
			fmt.Fprintf(&b, "<|im_start|>user\n<tool_response>\n%s\n</tool_response><|im_end|>\n", content(m))
		default:
			return "", &chattemplate.RenderError{Msg: "Unexpected message role."}
		}
	}
	if in.AddGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
		if v, ok := in.Kwargs["enable_thinking"].(bool); ok && !v {
			b.WriteString("<think>\n\n</think>\n\n")
		} else {
			b.WriteString("<think>\n")
		}
	}
	return b.String(), nil
}

func content(m chattemplate.Message) string {
	if m.Parts == nil {
		return m.Content
	}
	var s strings.Builder
	for _, p := range m.Parts {
		s.WriteString(p.Text)
	}
	return s.String()
}

func writeCall(b *strings.Builder, tc chattemplate.ToolCall) error {
	dec := json.NewDecoder(strings.NewReader(string(tc.Arguments)))
	dec.UseNumber()
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return &chattemplate.RenderError{Msg: "Can only get item pairs from a mapping."}
	}
	fmt.Fprintf(b, "\n<tool_call>\n<function=%s>\n", tc.Name)
	for dec.More() {
		k, _ := dec.Token()
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return &chattemplate.RenderError{Msg: err.Error()}
		}
		val := string(v)
		var s string
		if json.Unmarshal(v, &s) == nil {
			val = s
		}
		fmt.Fprintf(b, "<parameter=%v>\n%s\n</parameter>\n", k, val)
	}
	b.WriteString("</function>\n</tool_call>")
	return nil
}

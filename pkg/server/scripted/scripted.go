//go:build nvmai_scripted

package scripted

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/jsonobj"
	"github.com/nvmai/nvmai/pkg/server/servertest"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// Script is the JSON file that drives the engine:
//
//	{
//	  "model": "scripted",          // id in /v1/models (default "scripted")
//	  "context": 1048576,           // context in tokens (default 1048576)
//	  "token_delay_ms": 0,          // pause before each token
//	  "rounds": [
//	    {"reasoning": "I will run it.",
//	     "tool_calls": [            // alternatives: the first whose name the
//	       {"name": "exec_command", "arguments": {"cmd": "echo hi"}},  // request offers
//	       {"name": "shell", "arguments": {"command": ["bash", "-lc", "echo hi"]}}]},
//	    {"reasoning": "It ran.", "answer": "The command printed: {{tool_output}}"}
//	  ]
//	}
//
// The round is the number of tool results after the conversation's last
// user message (0 for a new question), capped at the last round. A round
// with tool_calls calls the first alternative among the request's tools (or
// answers saying none matched); a round without answers. In an answer,
// {{tool_output}} is the last tool result (trimmed) and {{user}} the last
// user message. Reasoning is emitted only when the prompt opens a think
// block (thinking on).
type Script struct {
	Model        string  `json:"model"`
	Context      int     `json:"context"`
	TokenDelayMS int     `json:"token_delay_ms"`
	Rounds       []Round `json:"rounds"`
}

// Round is what the engine emits at one point of the conversation.
type Round struct {
	Reasoning string `json:"reasoning"`
	ToolCalls []Call `json:"tool_calls"`
	Answer    string `json:"answer"`
}

// Call is a tool call: a name and an arguments object (its key order is
// kept in the emitted markup).
type Call struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// maxScript bounds the script file.
const maxScript = 1 << 20

// ParseScript reads and checks a script.
func ParseScript(data []byte, file string) (*Script, error) {
	var s Script
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %v (the format is documented in docs/responses.md)", file, err)
	}
	if len(s.Rounds) == 0 {
		return nil, fmt.Errorf("%s: rounds is empty; give at least one round", file)
	}
	for i, r := range s.Rounds {
		for j, c := range r.ToolCalls {
			if c.Name == "" {
				return nil, fmt.Errorf("%s: rounds[%d].tool_calls[%d] has no name", file, i, j)
			}
			if len(c.Arguments) == 0 {
				s.Rounds[i].ToolCalls[j].Arguments = json.RawMessage("{}")
			} else if _, err := jsonobj.Fields(c.Arguments); err != nil {
				return nil, fmt.Errorf("%s: rounds[%d].tool_calls[%d].arguments must be a JSON object: %v", file, i, j, err)
			}
		}
		if len(r.ToolCalls) == 0 && r.Answer == "" {
			return nil, fmt.Errorf("%s: rounds[%d] has neither tool_calls nor an answer", file, i)
		}
	}
	if s.Model == "" {
		s.Model = "scripted"
	}
	if s.Context <= 0 {
		s.Context = 1 << 20
	}
	return &s, nil
}

// Engine is the scripted server.Engine.
type Engine struct {
	tok    *tokenizer.Tokenizer
	script *Script
	log    io.Writer
	logMu  sync.Mutex
}

// Load reads the script at scriptPath and the tokenizer of dir (an
// install or a Hugging Face snapshot: tokenizer.json and
// tokenizer_config.json). log receives one line per generation (round,
// tools offered, the last tool result), nil for none.
func Load(scriptPath, dir string, log io.Writer) (*Engine, error) {
	data, err := limits.ReadFile(scriptPath, maxScript)
	if err != nil {
		return nil, fmt.Errorf("reading the script: %w", err)
	}
	s, err := ParseScript(data, scriptPath)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	return New(tok, s, log), nil
}

// New returns an engine over a tokenizer and a parsed script.
func New(tok *tokenizer.Tokenizer, s *Script, log io.Writer) *Engine {
	return &Engine{tok: tok, script: s, log: log}
}

// Info implements server.Engine.
func (e *Engine) Info() server.ModelInfo {
	return server.ModelInfo{ID: e.script.Model, Context: e.script.Context, Budget: "0"}
}

// Tokenize implements server.Engine with the real tokenizer.
func (e *Engine) Tokenize(text string, limit int) ([]int, bool) {
	return e.tok.EncodeLimit(text, limit)
}

// Generate implements server.Engine: it reads the conversation back from
// the prompt and emits the round's text token by token.
func (e *Engine) Generate(ctx context.Context, g server.Generation, onToken func(string) bool) (server.Outcome, error) {
	start := time.Now()
	conv := readPrompt(e.tok.Decode(g.Prompt))
	round := min(conv.toolResults, len(e.script.Rounds)-1)
	text := e.reply(e.script.Rounds[round], conv)
	e.logf("scripted: round %d of %d; tools offered: %s; tool results since the last user message: %d; last tool output: %q",
		round+1, len(e.script.Rounds), strings.Join(conv.tools, ", "), conv.toolResults, conv.lastToolOutput)
	out := server.Outcome{Finish: server.FinishEOS, Prefill: time.Since(start)}
	ids := e.tok.Encode(text)
	dec := e.tok.NewStreamDecoder(tokenizer.DecodeOptions{})
	for i, id := range ids {
		if i == g.MaxTokens {
			out.Finish = server.FinishLength
			break
		}
		if err := e.pause(ctx); err != nil {
			return out, err
		}
		if i == 0 {
			out.FirstToken = time.Since(start)
		}
		out.CompletionTokens++
		if piece := dec.Push(id); piece != "" && !onToken(piece) {
			out.Finish = server.FinishStopped
			break
		}
	}
	if out.Finish == server.FinishEOS {
		if rest := dec.Flush(); rest != "" {
			onToken(rest)
		}
		out.CompletionTokens++ // the end-of-sequence token, as a model counts it
	}
	out.Decode = time.Since(start) - out.Prefill
	return out, nil
}

func (e *Engine) pause(ctx context.Context) error {
	return servertest.Sleep(ctx, time.Duration(e.script.TokenDelayMS)*time.Millisecond)
}

func (e *Engine) logf(format string, args ...any) {
	if e.log == nil {
		return
	}
	e.logMu.Lock()
	defer e.logMu.Unlock()
	fmt.Fprintf(e.log, format+"\n", args...)
}

// reply is the text the model would generate for round r.
func (e *Engine) reply(r Round, conv conversation) string {
	var b strings.Builder
	if conv.thinking {
		b.WriteString(r.Reasoning + "\n</think>\n\n")
	}
	if len(r.ToolCalls) == 0 {
		b.WriteString(fill(r.Answer, conv))
		return b.String()
	}
	for _, c := range r.ToolCalls {
		if conv.offers(c.Name) {
			b.WriteString(markup(c))
			return b.String()
		}
	}
	names := make([]string, len(r.ToolCalls))
	for i, c := range r.ToolCalls {
		names[i] = c.Name
	}
	fmt.Fprintf(&b, "scripted engine: none of the script's tools (%s) is among the request's tools (%s)", strings.Join(names, ", "), strings.Join(conv.tools, ", "))
	return b.String()
}

func fill(answer string, conv conversation) string {
	return strings.NewReplacer("{{tool_output}}", strings.TrimSpace(conv.lastToolOutput), "{{user}}", conv.lastUser).Replace(answer)
}

// markup writes c in the Qwen3-Coder XML the Qwen3.5/3.6 templates ask
// for: string values raw, others as JSON.
func markup(c Call) string {
	var b strings.Builder
	b.WriteString("<tool_call>\n<function=" + c.Name + ">\n")
	fields, _ := jsonobj.Fields(c.Arguments)
	for _, f := range fields {
		v := string(f.Value)
		var s string
		if json.Unmarshal(f.Value, &s) == nil {
			v = s
		}
		b.WriteString("<parameter=" + f.Key + ">\n" + v + "\n</parameter>\n")
	}
	b.WriteString("</function>\n</tool_call>")
	return b.String()
}

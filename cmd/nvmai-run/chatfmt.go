package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// chatFormat is how --chat and chat turn a conversation into tokens. An
// install whose chat template reads reasoning_effort (the Qwen3.8 family,
// told by what the template does: chattemplate.Features) is rendered with
// that template, so its reasoning-effort sentence, its empty-system rule and
// its rendering of earlier reasoning (preserve_thinking on) are what the
// model reads. Every other install keeps the plain ChatML encoding chat has
// always used (tmpl nil: server.PlainChatML). Either way the rendering is
// the server core's (server.RenderChat).
type chatFormat struct {
	tmpl   *chattemplate.Template
	effort string // reasoning_effort for tmpl; "" leaves the template's default
}

// chatFormatFor picks the format for the install in dir and checks
// --reasoning-effort against it.
func chatFormatFor(c *cli.Context, dir string) (*chatFormat, error) {
	effort := c.String("reasoning-effort")
	tmpl, err := chattemplate.Load(dir)
	if err != nil && !errors.Is(err, chattemplate.ErrNoTemplate) {
		if c.IsSet("reasoning-effort") {
			return nil, fmt.Errorf("--reasoning-effort needs the install's chat template: %w", err)
		}
		return &chatFormat{}, nil // chat has never needed the template
	}
	if tmpl == nil || len(tmpl.Features().ReasoningEfforts) == 0 {
		if c.IsSet("reasoning-effort") {
			return nil, cliutil.Usagef("--reasoning-effort: this install's chat template has no reasoning effort (Qwen3.8-family templates have one)")
		}
		return &chatFormat{}, nil
	}
	f := &chatFormat{tmpl: tmpl}
	if c.IsSet("reasoning-effort") {
		if err := f.setEffort(effort); err != nil {
			return nil, cliutil.Usagef("--reasoning-effort: %v", err)
		}
	}
	return f, nil
}

// setEffort sets reasoning_effort to one of the values the template takes.
func (f *chatFormat) setEffort(v string) error {
	if f.tmpl == nil {
		return errors.New("this model's chat template has no reasoning effort")
	}
	feat := f.tmpl.Features()
	if !feat.Accepts(v) {
		return fmt.Errorf("%q: this model's chat template takes %s (default %s)", v, strings.Join(feat.ReasoningEfforts, ", "), f.defaultEffort())
	}
	f.effort = v
	return nil
}

// currentEffort is the reasoning effort the template renders with.
func (f *chatFormat) currentEffort() string {
	if f.effort != "" {
		return f.effort
	}
	return f.defaultEffort()
}

func (f *chatFormat) defaultEffort() string {
	if d := f.tmpl.Features().DefaultEffort; d != "" {
		return d
	}
	return "the template's"
}

// renderer is the template turns are rendered with: the install's for the
// Qwen3.8 family, else plain ChatML.
func (f *chatFormat) renderer() server.Renderer {
	if f.tmpl == nil {
		return server.PlainChatML{}
	}
	return f.tmpl
}

// render renders msgs with an open assistant turn, as the server renders
// a chat request (server.RenderChat), the reasoning effort a kwarg.
func (f *chatFormat) render(msgs []chattemplate.Message) (string, error) {
	req := &server.ChatRequest{Messages: msgs}
	if f.effort != "" {
		req.Kwargs = map[string]any{"reasoning_effort": f.effort}
	}
	return server.RenderChat(f.renderer(), req)
}

// oneShot is the prompt of --chat: the system message (when given) and
// the user's. Added tokens typed in them are matched as tokens, as
// transformers' apply_chat_template(tokenize=True) does.
func (f *chatFormat) oneShot(tok *tokenizer.Tokenizer, system, user string) ([]int, error) {
	var msgs []chattemplate.Message
	if system != "" {
		msgs = append(msgs, chattemplate.Message{Role: "system", Content: system})
	}
	text, err := f.render(append(msgs, chattemplate.Message{Role: "user", Content: user}))
	if err != nil {
		return nil, err
	}
	return tok.Encode(text), nil
}

// encodeRendered encodes text, a rendering, with the contents of typed
// messages (literals, in the order they appear in text) encoded as plain
// text: <|im_end|> typed by the user does not end the turn. A literal is
// found where a message's content sits, after a newline and right before
// the turn's <|im_end|>, as typed (plain ChatML) or trimmed (the Qwen3.8
// template trims contents); one not found so is left to be encoded with
// the rest of text, whose added tokens are matched.
func encodeRendered(tok *tokenizer.Tokenizer, text string, literals []string) []int {
	var ids []int
	for _, lit := range literals {
		i := strings.Index(text, "\n"+lit+"<|im_end|>")
		if i < 0 {
			lit = strings.TrimSpace(lit)
			i = strings.Index(text, "\n"+lit+"<|im_end|>")
		}
		if lit == "" || i < 0 {
			continue
		}
		i++ // after the newline
		ids = append(ids, tok.Encode(text[:i])...)
		ids = append(ids, tok.EncodeText(lit)...)
		text = text[i+len(lit):]
	}
	return append(ids, tok.Encode(text)...)
}

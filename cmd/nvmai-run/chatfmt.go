package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// chatFormat is how --chat and chat turn a conversation into tokens. An
// install whose chat template reads reasoning_effort (the Qwen3.8 family,
// told by what the template does: chattemplate.Features) is rendered with
// that template, so its reasoning-effort sentence, its empty-system rule and
// its rendering of earlier reasoning (preserve_thinking on) are what the
// model reads. Every other install keeps the plain ChatML encoding chat has
// always used (tmpl nil).
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

// render renders msgs with an open assistant turn.
func (f *chatFormat) render(msgs []chattemplate.Message) (string, error) {
	in := chattemplate.Input{Messages: msgs, AddGenerationPrompt: true}
	if f.effort != "" {
		in.Kwargs = map[string]any{"reasoning_effort": f.effort}
	}
	return f.tmpl.Render(in)
}

// oneShot is the prompt of --chat: the system message (when given) and
// the user's.
func (f *chatFormat) oneShot(tok *tokenizer.Tokenizer, system, user string) ([]int, error) {
	var msgs []tokenizer.Message
	if system != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: system})
	}
	msgs = append(msgs, tokenizer.Message{Role: "user", Content: user})
	if f.tmpl == nil {
		return tok.EncodeChat(msgs, true), nil
	}
	var tm []chattemplate.Message
	for _, m := range msgs {
		tm = append(tm, chattemplate.Message{Role: m.Role, Content: m.Content})
	}
	text, err := f.render(tm)
	if err != nil {
		return nil, err
	}
	return tok.Encode(text), nil
}

// encodeRendered encodes text, a rendering, with the contents of typed
// messages (literals, in the order they appear in text) encoded as plain
// text: <|im_end|> typed by the user does not end the turn, as in the
// ChatML path. A literal is found trimmed (the template trims contents)
// where a message's content sits, after a newline and right before the
// turn's <|im_end|>; one not found so is left to be encoded with the rest
// of text, whose added tokens are matched.
func encodeRendered(tok *tokenizer.Tokenizer, text string, literals []string) []int {
	var ids []int
	for _, lit := range literals {
		lit = strings.TrimSpace(lit)
		if lit == "" {
			continue
		}
		i := strings.Index(text, "\n"+lit+"<|im_end|>")
		if i < 0 {
			continue
		}
		i++ // after the newline
		ids = append(ids, tok.Encode(text[:i])...)
		ids = append(ids, tok.EncodeText(lit)...)
		text = text[i+len(lit):]
	}
	return append(ids, tok.Encode(text)...)
}

// splitReply separates a reply generated after prompt into the reasoning
// and the answer, as the template's reasoning_content and content: after
// an open <think> the reasoning runs to </think> (all of a reply cut
// before it); after a closed one there is none.
func splitReply(prompt, reply string) (reasoning, content string) {
	if !strings.HasSuffix(prompt, "<think>\n") {
		return "", reply
	}
	if r, c, ok := strings.Cut(reply, "</think>"); ok {
		return r, c
	}
	return reply, ""
}

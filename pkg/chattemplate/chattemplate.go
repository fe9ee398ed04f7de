// Package chattemplate renders a conversation into the prompt text a model
// was trained on, with the install's own Jinja chat template, exactly as
// transformers' apply_chat_template does.
//
// The engine is github.com/ardanlabs/jinja, whose defaults are transformers'
// environment (trim_blocks, lstrip_blocks, loop controls, a tojson that keeps
// key order, uses Python's separators and escapes neither HTML nor non-ASCII).
// Data reaches it as ordered values, so tool schemas and tool-call arguments
// keep the client's key order. Byte equality with Python Jinja2 is checked by
// the goldens under testdata/ (see scripts/render-template-goldens.py).
package chattemplate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/ardanlabs/jinja"

	"github.com/nvmai/nvmai/pkg/limits"
)

// Message is one turn of a conversation as the template sees it.
type Message struct {
	Role string // system, user, assistant, tool (passed through unchanged)
	// Content is the text. When Parts is non-nil the template receives the
	// list of parts instead (as an OpenAI client sent it).
	Content string
	Parts   []Part
	// ContentNull makes the template see content as none (the client sent
	// null or no content, as an assistant turn with only tool calls does).
	// It wins over Content; Parts wins over it.
	ContentNull bool
	// ReasoningContent is an assistant turn's reasoning, nil when the client
	// sent none (the template then splits it out of Content).
	ReasoningContent *string
	ToolCalls        []ToolCall
	ToolCallID       string // tool: the call this result answers
	Name             string // tool: the function's name, when given
}

// Part is one item of a list-valued content.
type Part struct {
	Type string // "text" (others are refused before rendering)
	Text string
}

// ToolCall is a call an assistant turn made.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is the call's arguments as a JSON object, in the client's key
	// order (an OpenAI client's JSON-string arguments decoded first). A value
	// that is not an object is passed to the template as a string: a JSON
	// string as its text, anything else as its JSON text.
	Arguments json.RawMessage
}

// Input is everything a render depends on.
type Input struct {
	Messages []Message
	// Tools are the client's tool objects ({"type":"function","function":{…}}),
	// raw so that tojson keeps the client's key order. nil passes tools=None,
	// as transformers does when a request has no tools.
	Tools               []json.RawMessage
	AddGenerationPrompt bool
	// Kwargs are extra template variables (chat_template_kwargs):
	// enable_thinking, preserve_thinking, … Values may be encoding/json values
	// (bool, float64, string, []any, map[string]any, json.Number) or
	// json.RawMessage, which keeps object key order. An integral float64 is
	// passed as an int, since JSON does not tell 1 from 1.0 once decoded.
	// Kwargs override the special-token variables.
	Kwargs map[string]any
}

// Template is a parsed chat template. It is safe for concurrent use.
type Template struct {
	source string
	sum    string
	origin string
	tmpl   *jinja.Template
	// specials are the special-token variables (bos_token, eos_token, …)
	// transformers adds to every render.
	specials map[string]jinja.Value

	featuresOnce sync.Once
	features     Features
}

// RenderError is a failure of the template itself (raise_exception, a type
// error): the request is at fault, so servers answer it with 400.
type RenderError struct{ Msg string }

func (e *RenderError) Error() string { return "chat template: " + e.Msg }

// Parse compiles a template's source. A template parsed this way has no
// special-token variables; Load and LoadFile read them from the install.
func Parse(source string) (*Template, error) {
	tmpl, err := compile(source)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(source))
	return &Template{source: source, sum: hex.EncodeToString(sum[:]), tmpl: tmpl}, nil
}

// compile wraps the engine, which may panic on input it did not foresee.
func compile(source string) (t *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("chat template does not compile: %v", r)
		}
	}()
	t, err = jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat template does not compile: %w", err)
	}
	return t, nil
}

// Source is the template text.
func (t *Template) Source() string { return t.source }

// SHA256 is the hex sha256 of the template text (prompt caches key on it).
func (t *Template) SHA256() string { return t.sum }

// Origin names where the template was read from ("DIR/chat_template.jinja",
// "DIR/tokenizer_config.json", a file), empty for Parse.
func (t *Template) Origin() string { return t.origin }

// ErrNoTemplate is returned (wrapped) by Load when a directory has neither a
// chat_template.jinja nor a chat_template in tokenizer_config.json.
var ErrNoTemplate = errors.New("no chat template")

// Template files: the names transformers uses.
const (
	jinjaFile           = "chat_template.jinja"
	tokenizerConfigFile = "tokenizer_config.json"
)

// maxTemplate bounds chat_template.jinja. The template is otherwise embedded
// in tokenizer_config.json, so its sidecar needs no more room than that file;
// pkg/convert copies it under the same ceiling.
const maxTemplate = limits.SnapshotJSON

// Load reads an install's (or snapshot's) template: chat_template.jinja when
// present, else tokenizer_config.json's chat_template, as transformers does.
// The special-token variables come from tokenizer_config.json.
func Load(dir string) (*Template, error) {
	cfg, err := readTokenizerConfig(dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, jinjaFile)
	src, err := limits.ReadFile(path, maxTemplate)
	switch {
	case err == nil:
		return finishLoad(string(src), path, cfg)
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("reading the chat template: %w", err)
	}
	cfgPath := filepath.Join(dir, tokenizerConfigFile)
	if cfg == nil || len(cfg.ChatTemplate) == 0 {
		return nil, fmt.Errorf("%s: %w: no %s and no chat_template in %s; pass a template file", dir, ErrNoTemplate, jinjaFile, tokenizerConfigFile)
	}
	src2, err := cfg.template()
	if err != nil {
		return nil, fmt.Errorf("%s: chat_template: %w", cfgPath, err)
	}
	return finishLoad(src2, cfgPath, cfg)
}

// LoadFile reads the template from path (a --chat-template override) and the
// special-token variables from dir's tokenizer_config.json when there is one.
func LoadFile(path, dir string) (*Template, error) {
	var cfg *tokenizerConfig
	if dir != "" {
		var err error
		if cfg, err = readTokenizerConfig(dir); err != nil {
			return nil, err
		}
	}
	src, err := limits.ReadFile(path, maxTemplate)
	if err != nil {
		return nil, fmt.Errorf("reading the chat template: %w", err)
	}
	return finishLoad(string(src), path, cfg)
}

func finishLoad(src, origin string, cfg *tokenizerConfig) (*Template, error) {
	t, err := Parse(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", origin, err)
	}
	t.origin = origin
	if cfg != nil {
		t.specials = cfg.specialTokens()
	}
	return t, nil
}

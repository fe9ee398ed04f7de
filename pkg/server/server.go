package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/nvmai/nvmai/pkg/chatparse"
	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/sample"
)

// Config configures a Server.
type Config struct {
	// QueueLimit is how many requests may wait behind the running one
	// (default 4); more are refused (ErrQueueFull).
	QueueLimit int
	// Thinking is the default for enable_thinking when a request does not
	// say (nil: leave it to the template, i.e. the model's default).
	Thinking *bool
	// Log receives one record per request; nil writes text lines to stderr.
	Log func(RequestLog)
	// Now is the clock (tests).
	Now func() time.Time
	// Notice receives one line per model load and unload (--models-dir);
	// nil discards them.
	Notice func(string)
	// Defaults are the server-wide generation defaults (serve's
	// --max-tokens, --temperature, --top-k, --top-p, --seed).
	Defaults Defaults
	// StrictMaxTokens refuses (400) a request whose prompt plus max_tokens
	// exceeds the context, as the OpenAI and Responses endpoints did before
	// issue #39 (serve --strict-max-tokens). By default max_tokens is
	// lowered to what fits, the reply ends with finish reason length at the
	// context, and the request's log line says so, as llama-server does: an
	// agent that asks for 32,000 tokens on a 16k context still starts. The
	// Anthropic endpoint and chat always lower it. A prompt that alone
	// does not fit is refused either way.
	StrictMaxTokens bool
	// NoToolConstraint turns off the tool-call constraint for every
	// request (serve --no-constrain-tools): calls are then free text
	// parsed after the fact, as before issue #40.
	NoToolConstraint bool
}

// Defaults are server-wide generation settings, as llama-server's -n,
// --temp, --top-k, --top-p and --seed: each sampling field that is set
// replaces the model's default (generation_config.json), and a request's
// own field replaces it in turn.
type Defaults struct {
	// MaxTokens (0: none) is the max_tokens of a request that gives none
	// and the most any request generates: a larger max_tokens is lowered
	// to it (finish reason length when reached).
	MaxTokens   int
	Temperature *float64
	TopK        *int
	TopP        *float64
	// Seed seeds the requests that give no seed (nil: each draws one).
	Seed *uint64
}

// apply lays the set defaults over the model's sampling defaults.
func (d Defaults) apply(p sample.Params) sample.Params {
	if d.Temperature != nil {
		p.Temperature = *d.Temperature
	}
	if d.TopK != nil {
		p.TopK = *d.TopK
	}
	if d.TopP != nil {
		p.TopP = *d.TopP
	}
	if d.Seed != nil {
		p.Seed = *d.Seed
	}
	return p
}

// Validate reports defaults no request could run with.
func (d Defaults) Validate() error {
	if d.MaxTokens < 0 {
		return fmt.Errorf("max_tokens %d must be at least 1", d.MaxTokens)
	}
	return d.apply(sample.Params{TopP: 1}).Validate()
}

// DefaultMaxTokens is Defaults.MaxTokens (0: none), for an adapter whose
// protocol has its own default (/v1/completions: 16).
func (s *Server) DefaultMaxTokens() int { return s.cfg.Defaults.MaxTokens }

// Server is the core: it holds the engine once loaded and runs requests
// one at a time.
type Server struct {
	cfg      Config
	q        queue
	mu       sync.RWMutex
	engine   Engine
	renderer Renderer
	loadErr  error
	ids      atomic.Uint64
	idle     *time.Timer
	models   *modelSet   // several models (SetModels); nil with one
	loaded   atomic.Bool // a model of models is in memory
	// tokenizers holds a token per prompt being tokenized: each holds up
	// to a context of ids and a normalised copy of its text, so many large
	// prompts arriving together wait for a slot rather than all holding
	// that memory at once (#44 S23).
	tokenizers chan struct{}
	// generating counts the generations running (Activity).
	generating atomic.Int64
	live       liveState // the latest generation, for Live
}

// maxTokenizers is how many prompts are tokenized at once.
const maxTokenizers = 2

// New returns a server with no engine yet (Health reports loading).
func New(cfg Config) *Server {
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = 4
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = TextLogger(os.Stderr)
	}
	s := &Server{cfg: cfg, tokenizers: make(chan struct{}, maxTokenizers)}
	s.q.limit = cfg.QueueLimit
	// Snapshots and request buffers are large and short-lived; the Go
	// runtime hands freed memory back to the OS only slowly, so an idle
	// server returns it at once (a second after the last request).
	s.idle = time.AfterFunc(time.Hour, func() {
		if s.q.waiting() == 0 {
			debug.FreeOSMemory()
		}
	})
	s.idle.Stop()
	s.q.onIdle = func() {
		s.idle.Reset(time.Second)
		s.armIdleUnload()
	}
	return s
}

// SetEngine makes the server ready.
func (s *Server) SetEngine(e Engine, r Renderer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.engine, s.renderer = e, r
	// An engine that runs several generations at once (RuntimeEngine with
	// --parallel) gets that many at once from the queue.
	if p, ok := e.(interface{ Parallel() int }); ok && s.models == nil {
		s.q.setSlots(p.Parallel())
	}
}

// SetLoadError records that loading failed (Health then reports it).
func (s *Server) SetLoadError(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loadErr = err
}

// Ready returns the engine and renderer, or an error while loading.
func (s *Server) ready() (Engine, Renderer, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.models != nil {
		if s.engine == nil {
			return nil, nil, &Error{Kind: KindUnavailable, Msg: "no model is loaded; a request naming one loads it"}
		}
		return s.engine, s.renderer, nil
	}
	if s.engine == nil {
		if s.loadErr != nil {
			return nil, nil, &Error{Kind: KindUnavailable, Msg: "the model failed to load: " + s.loadErr.Error()}
		}
		return nil, nil, &Error{Kind: KindUnavailable, Msg: "the model is still loading; retry when GET /health answers 200"}
	}
	return s.engine, s.renderer, nil
}

// Health is nil once the model is loaded, or with several models once
// they are listed (whether one is in memory or not: each loads on demand).
func (s *Server) Health() error {
	s.mu.RLock()
	several := s.models != nil
	s.mu.RUnlock()
	if several {
		return nil
	}
	_, _, err := s.ready()
	return err
}

// Info describes the loaded model (ok false while loading).
func (s *Server) Info() (ModelInfo, bool) {
	e, _, err := s.ready()
	if err != nil {
		return ModelInfo{}, false
	}
	return e.Info(), true
}

// Log writes a request record (adapters log requests the core refused too).
func (s *Server) Log(r RequestLog) { s.cfg.Log(r) }

// NewID returns a process-unique id with prefix (chatcmpl-, cmpl-, …).
func (s *Server) NewID(prefix string) string {
	return fmt.Sprintf("%s%x%04x", prefix, s.cfg.Now().UnixNano(), s.ids.Add(1)&0xffff)
}

// Now is the server's clock.
func (s *Server) Now() time.Time { return s.cfg.Now() }

// ErrorKind classifies a core error so that each protocol can map it.
type ErrorKind int

const (
	KindInvalid         ErrorKind = iota // the request is at fault (400)
	KindContextOverflow                  // prompt + max tokens exceed the context (400)
	KindQueueFull                        // too many waiting (429 / 529)
	KindUnavailable                      // loading (503)
	KindInternal                         // the engine failed (500)
	KindNotFound                         // the request names a model not served (404)
)

// Error is a failure with a kind and a message meant for the client.
type Error struct {
	Kind  ErrorKind
	Param string // the request field at fault, when known
	Msg   string
}

func (e *Error) Error() string { return e.Msg }

func invalid(param, format string, args ...any) *Error {
	return &Error{Kind: KindInvalid, Param: param, Msg: fmt.Sprintf(format, args...)}
}

// ToolChoiceMode is OpenAI's tool_choice.
type ToolChoiceMode string

const (
	ToolAuto     ToolChoiceMode = "auto"
	ToolNone     ToolChoiceMode = "none"
	ToolRequired ToolChoiceMode = "required"
	ToolNamed    ToolChoiceMode = "function"
)

// ChatRequest is a chat turn, whatever protocol it arrived in.
type ChatRequest struct {
	Endpoint string // for the log line
	// Model is the model the client asked for ("" when it did not say).
	// With one model loaded it is ignored; with --models-dir it picks one.
	Model    string
	Messages []chattemplate.Message
	Tools    []json.RawMessage // client tool objects {"type":"function","function":{…}}
	// ToolChoice: auto (default); none renders no tools and never returns
	// calls; required and a named function start the reply with the
	// call's opening markup (thinking off for that turn), so the model
	// continues inside a call.
	ToolChoice        ToolChoiceMode
	ToolName          string // ToolNamed: the function
	ParallelToolCalls bool   // false: generation ends when a second call starts
	// NoToolConstraint leaves this request's tool calls unconstrained
	// (the request field nvmai_constrain_tools: false).
	NoToolConstraint bool
	// Kwargs are chat_template_kwargs; Thinking, when set, is
	// enable_thinking unless Kwargs already has it.
	Kwargs   map[string]any
	Thinking *bool
	// ReasoningEffort is the client's reasoning level, one of
	// chattemplate.EffortLevels ("" when it did not say; each adapter
	// refuses other values and maps none/minimal onto Thinking off). A
	// template that reads reasoning_effort (chattemplate.Features) gets the
	// nearest level it accepts, unless Kwargs has reasoning_effort; other
	// templates (Qwen3.5/3.6) never see it.
	ReasoningEffort string
	// EffortParam names the request field ReasoningEffort came from, for
	// errors.
	EffortParam string
	// NoGenerationPrompt renders without the assistant header
	// (/apply-template with add_generation_prompt false).
	NoGenerationPrompt bool
	Sampling           sample.Params
	MaxTokens          int // 0: up to the context
	// ClampMaxTokens lowers MaxTokens to what fits the context after the
	// prompt instead of refusing the request: Anthropic clients send a
	// fixed max_tokens (Claude Code 32k) whatever the server's context.
	ClampMaxTokens bool
	Stop           []string
	// Format constrains the reply's content to JSON (nil: free text).
	// Each adapter compiles it from its protocol's field (response_format,
	// text.format, output_format) with jsonconstrain, answering a schema
	// that does not compile with 400 before calling the core.
	Format *jsonconstrain.Schema
	// Tokenize, set by an in-process caller that keeps a conversation's
	// tokens (nvmai-run chat), tokenizes the rendered prompt in place of
	// the engine: the tokens its engine already holds, then only the new
	// text, the contents typed by the user as text. Its error refuses the
	// request as it is.
	Tokenize func(prompt string) ([]int, error)
}

// CompletionRequest is a raw-prompt completion.
type CompletionRequest struct {
	Endpoint  string
	Model     string // as ChatRequest.Model
	Prompt    string
	Sampling  sample.Params
	MaxTokens int
	Stop      []string
	Format    *jsonconstrain.Schema // as ChatRequest.Format: the completion is a JSON document
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int
	CachedTokens     int
	CompletionTokens int
}

// ChatResult is a finished chat turn. Its content, reasoning and calls are
// exactly the concatenation of the events streamed.
type ChatResult struct {
	Content   string
	Reasoning string
	ToolCalls []chatparse.ToolCall
	Finish    string // stop, length, tool_calls
	// StopSequence is the client stop string that ended generation, ""
	// when none did (Anthropic reports it as stop_sequence).
	StopSequence string
	Usage        Usage
	Outcome      Outcome
}

// CompletionResult is a finished raw completion.
type CompletionResult struct {
	Text    string
	Finish  string // stop, length
	Usage   Usage
	Outcome Outcome
}

// ApplyTemplate renders the request's prompt (POST /apply-template). With
// several models it renders with the loaded model's template only.
func (s *Server) ApplyTemplate(req *ChatRequest) (string, error) {
	id, e, r, err := s.engineFor(req.Model)
	if err == nil && e == nil {
		err = &Error{Kind: KindUnavailable, Msg: fmt.Sprintf("the model %q is not loaded; /apply-template renders with the loaded model's template (send it a request first)", id)}
	}
	if err != nil {
		return "", err
	}
	p, _, err := s.renderChat(r, req)
	return p, err
}

// CountChatTokens renders and tokenizes req as PrepareChat does, without
// checking the context or queueing: the prompt's token count, the forced
// start of the reply included (/v1/messages/count_tokens).
func (s *Server) CountChatTokens(req *ChatRequest) (int, error) {
	id, e, r, err := s.engineFor(req.Model)
	if err != nil {
		return 0, err
	}
	if e == nil { // --models-dir: counting must not unload the running model
		return 0, &Error{Kind: KindUnavailable, Msg: fmt.Sprintf("model %q is not loaded now; counting its tokens needs its tokenizer, which loads with its first request", id)}
	}
	prompt, forced, err := s.renderChat(r, req)
	if err != nil {
		return 0, err
	}
	ctxLen := e.Info().Context
	ids, over := s.tokenize(e, prompt+forced, ctxLen)
	if over {
		return 0, overflow(ctxLen)
	}
	return len(ids), nil
}

// tokenize runs e.Tokenize in one of the maxTokenizers slots.
func (s *Server) tokenize(e Engine, text string, limit int) ([]int, bool) {
	s.tokenizers <- struct{}{}
	defer func() { <-s.tokenizers }()
	return e.Tokenize(text, limit)
}

// overflow is the refusal of a prompt whose tokenization stopped past the
// context, so its exact length is not known.
func overflow(ctxLen int) *Error {
	return &Error{Kind: KindContextOverflow, Param: "messages", Msg: fmt.Sprintf("the prompt has more than %d tokens, more than fit the context of %d tokens (one is needed for the reply); shorten it or restart the server with a larger --max-context", ctxLen, ctxLen)}
}

func (s *Server) templateInput(r Renderer, req *ChatRequest) (chattemplate.Input, error) {
	in := chattemplate.Input{Messages: req.Messages, AddGenerationPrompt: !req.NoGenerationPrompt, Kwargs: map[string]any{}}
	for k, v := range req.Kwargs {
		in.Kwargs[k] = v
	}
	if _, set := in.Kwargs["enable_thinking"]; !set {
		switch {
		case req.Thinking != nil:
			in.Kwargs["enable_thinking"] = *req.Thinking
		case s.cfg.Thinking != nil:
			in.Kwargs["enable_thinking"] = *s.cfg.Thinking
		}
	}
	if req.ToolChoice != ToolNone {
		in.Tools = req.Tools
	}
	switch req.ToolChoice {
	case ToolRequired, ToolNamed:
		if len(req.Tools) == 0 {
			return in, invalid("tool_choice", "tool_choice %q needs tools", req.ToolChoice)
		}
		if req.ToolChoice == ToolNamed && !hasTool(req.Tools, req.ToolName) {
			return in, invalid("tool_choice", "tool_choice names function %q, which is not among the request's tools", req.ToolName)
		}
		in.Kwargs["enable_thinking"] = false // the forced call opens the reply
	}
	return in, reasoningEffort(r, req, in.Kwargs)
}

// featured is a renderer that can say what its template reads
// (*chattemplate.Template is one; PlainChatML is not).
type featured interface {
	Features() chattemplate.Features
}

// reasoningEffort sets kwargs' reasoning_effort from req.ReasoningEffort
// for a template that reads it (Qwen3.8: low, medium, xhigh), and checks a
// reasoning_effort the client put in chat_template_kwargs itself, which
// such a template reads only while thinking is on. Templates that do not
// read it are left exactly as they were.
func reasoningEffort(r Renderer, req *ChatRequest, kwargs map[string]any) error {
	fr, ok := r.(featured)
	if !ok {
		return nil
	}
	f := fr.Features()
	if len(f.ReasoningEfforts) == 0 {
		return nil
	}
	if on, isBool := kwargs["enable_thinking"].(bool); isBool && !on {
		return nil // thinking off: the template ignores reasoning_effort
	}
	if v, set := kwargs["reasoning_effort"]; set {
		if sv, ok := v.(string); !ok || !f.Accepts(sv) {
			return invalid("chat_template_kwargs.reasoning_effort", "chat_template_kwargs.reasoning_effort %s: this model's chat template accepts %s",
				jsonText(v), strings.Join(f.ReasoningEfforts, ", "))
		}
		return nil
	}
	if req.ReasoningEffort == "" {
		return nil
	}
	v, ok := f.Effort(req.ReasoningEffort)
	if !ok {
		param := req.EffortParam
		if param == "" {
			param = "reasoning_effort"
		}
		return invalid(param, "%s %q: expected one of %s", param, req.ReasoningEffort, strings.Join(chattemplate.EffortLevels, ", "))
	}
	kwargs["reasoning_effort"] = v
	return nil
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// renderChat renders the prompt and the forced start of the reply.
func (s *Server) renderChat(r Renderer, req *ChatRequest) (prompt, forced string, err error) {
	in, err := s.templateInput(r, req)
	if err != nil {
		return "", "", err
	}
	prompt, err = safeRender(r, in)
	if err != nil {
		return "", "", err
	}
	switch req.ToolChoice {
	case ToolRequired:
		forced = "<tool_call>\n"
	case ToolNamed:
		forced = "<tool_call>\n<function=" + req.ToolName + ">\n"
	}
	return prompt, forced, nil
}

// RenderChat renders req's prompt with r as PrepareChat does, the forced
// start of the reply included, for an in-process caller that keeps the
// conversation's tokens itself (nvmai-run chat feeds only what follows
// the text its session holds, so a turn never re-reads the conversation).
func RenderChat(r Renderer, req *ChatRequest) (string, error) {
	var s Server // no server-wide enable_thinking: the template's default
	prompt, forced, err := s.renderChat(r, req)
	return prompt + forced, err
}

// opensReasoning reports whether prompt leaves the reply inside <think>
// (thinking on), so that the reply is reasoning until </think>.
func opensReasoning(prompt string) bool { return strings.HasSuffix(prompt, "<think>\n") }

// safeRender maps template failures (and panics inside the engine) to a
// 400 with the template's message.
func safeRender(r Renderer, in chattemplate.Input) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = invalid("messages", "chat template failed: %v", p)
		}
	}()
	out, err = r.Render(in)
	var re *chattemplate.RenderError
	if errors.As(err, &re) {
		return "", invalid("messages", "%s", re.Error())
	}
	if err != nil {
		return "", invalid("messages", "chat template: %v", err)
	}
	return out, nil
}

func hasTool(tools []json.RawMessage, name string) bool {
	for _, t := range parserTools(tools) {
		if t.Name == name {
			return true
		}
	}
	return false
}

// parserTools extracts name and parameter schema of each tool object.
func parserTools(tools []json.RawMessage) []chatparse.Tool {
	var out []chatparse.Tool
	for _, raw := range tools {
		var t struct {
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &t) == nil && t.Function.Name != "" {
			out = append(out, chatparse.Tool{Name: t.Function.Name, Parameters: t.Function.Parameters})
		}
	}
	return out
}

// Job is a validated request holding a place in the queue. Run it once,
// or Cancel it; either frees the place.
type Job struct {
	s     *Server
	e     Engine
	t     *ticket
	start time.Time
	// turn is when the job's turn began (zero until Wait has it): the
	// queue wait in its log line is turn − start.
	turn   time.Time
	prompt []int
	max    int
	// clampedFrom is the max_tokens the request asked for when it was
	// lowered to fit the context (0: not lowered), for the log line.
	clampedFrom int
	chat        *ChatRequest
	forced      string
	think       bool
	comp        *CompletionRequest
	// With several models: the job's model, whether it was not loaded
	// when prepared (rendering and tokenizing wait for its turn), and
	// whether Wait ran.
	model    string
	deferred bool
	began    bool
	beginErr error
}

// PrepareChat renders and tokenizes req, checks it against the context and
// takes a place in the queue, without waiting: every refusal happens here,
// before an adapter starts its response.
func (s *Server) PrepareChat(req *ChatRequest) (*Job, error) {
	start := s.cfg.Now()
	id, e, r, err := s.engineFor(req.Model)
	if err != nil {
		return nil, err
	}
	if req, err = formatRequest(req); err != nil {
		return nil, err
	}
	if e == nil {
		return s.prepareDeferred(&Job{s: s, start: start, chat: req, model: id}, req.MaxTokens, req.Sampling)
	}
	j := &Job{s: s, e: e, start: start, chat: req, model: id}
	return j.admitted(j.admit(req.MaxTokens, req.Sampling, func() error {
		prompt, forced, err := s.renderChat(r, req)
		if err != nil {
			return err
		}
		j.forced, j.think = forced, opensReasoning(prompt)
		if req.Tokenize != nil {
			ids, err := req.Tokenize(prompt + forced)
			if err != nil {
				return err
			}
			return j.checkIDs(ids, req.MaxTokens, req.ClampMaxTokens)
		}
		return j.check(prompt+forced, req.MaxTokens, req.ClampMaxTokens)
	}))
}

// engineFor is ready() with one model; with several it resolves the
// request's model (nil engine: not loaded now).
func (s *Server) engineFor(model string) (string, Engine, Renderer, error) {
	s.mu.RLock()
	several := s.models != nil
	s.mu.RUnlock()
	if several {
		return s.resolve(model)
	}
	e, r, err := s.ready()
	return "", e, r, err
}

// prepareDeferred takes a queue place for a job whose model is not loaded:
// what needs no model is checked now, the rest in its turn (Job.begin).
func (s *Server) prepareDeferred(j *Job, maxTokens int, p sample.Params) (*Job, error) {
	if err := checkParams(p, maxTokens); err != nil {
		return nil, err
	}
	if j.comp != nil && j.comp.Prompt == "" {
		return nil, invalid("prompt", "prompt is empty")
	}
	j.deferred = true
	return j, j.enqueue()
}

// PrepareCompletion is PrepareChat for a raw prompt.
func (s *Server) PrepareCompletion(req *CompletionRequest) (*Job, error) {
	start := s.cfg.Now()
	id, e, _, err := s.engineFor(req.Model)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return s.prepareDeferred(&Job{s: s, start: start, comp: req, model: id}, req.MaxTokens, req.Sampling)
	}
	if req.Prompt == "" {
		return nil, invalid("prompt", "prompt is empty")
	}
	j := &Job{s: s, e: e, start: start, comp: req, model: id}
	return j.admitted(j.admit(req.MaxTokens, req.Sampling, func() error {
		return j.check(req.Prompt, req.MaxTokens, false)
	}))
}

// admitted returns the job once admitted. With several models it lets go
// of the engine it was prepared on: its turn takes the one loaded then,
// and a queued job must not keep an unloaded model's memory alive.
func (j *Job) admitted(err error) (*Job, error) {
	if err != nil {
		return nil, err
	}
	if j.model != "" {
		j.e = nil
	}
	return j, nil
}

func checkParams(p sample.Params, maxTokens int) error {
	if err := p.Validate(); err != nil {
		return invalid("", "%s", strings.TrimPrefix(err.Error(), "sample: "))
	}
	if maxTokens < 0 {
		return invalid("max_tokens", "max_tokens must be at least 1")
	}
	return nil
}

// admit takes a queue place, then runs prepare (render, tokenize and
// check the prompt), giving the place back when prepare refuses. The
// place comes first so that a request the queue cannot take is refused
// before any rendering or tokenizing work (#44 S23).
func (j *Job) admit(maxTokens int, p sample.Params, prepare func() error) error {
	if err := checkParams(p, maxTokens); err != nil {
		return err
	}
	if err := j.enqueue(); err != nil {
		return err
	}
	if err := prepare(); err != nil {
		j.t.release()
		return err
	}
	return nil
}

// check tokenizes text and checks it and maxTokens against the context;
// clamp lowers maxTokens to what fits instead of refusing.
func (j *Job) check(text string, maxTokens int, clamp bool) error {
	ctxLen := j.e.Info().Context
	prompt, over := j.s.tokenize(j.e, text, ctxLen)
	if over {
		return overflow(ctxLen)
	}
	return j.checkIDs(prompt, maxTokens, clamp)
}

// checkIDs checks the prompt's tokens and maxTokens against the context.
func (j *Job) checkIDs(prompt []int, maxTokens int, clamp bool) error {
	if limit := j.s.cfg.Defaults.MaxTokens; limit > 0 && (maxTokens == 0 || maxTokens > limit) {
		maxTokens = limit
	}
	ctxLen := j.e.Info().Context
	j.prompt = prompt
	if len(j.prompt) >= ctxLen {
		return &Error{Kind: KindContextOverflow, Param: "messages", Msg: fmt.Sprintf("the prompt has %d tokens, more than fit the context of %d tokens (one is needed for the reply); shorten it or restart the server with a larger --max-context", len(j.prompt), ctxLen)}
	}
	j.max = maxTokens
	clamp = clamp || !j.s.cfg.StrictMaxTokens
	if j.max == 0 {
		j.max = ctxLen - len(j.prompt)
	} else if clamp && len(j.prompt)+j.max > ctxLen {
		j.clampedFrom, j.max = j.max, ctxLen-len(j.prompt)
	}
	if len(j.prompt)+j.max > ctxLen {
		return &Error{Kind: KindContextOverflow, Param: "max_tokens", Msg: fmt.Sprintf("the prompt has %d tokens and max_tokens asks for %d, together %d, more than the context of %d tokens; lower max_tokens to at most %d", len(j.prompt), j.max, len(j.prompt)+j.max, ctxLen, ctxLen-len(j.prompt))}
	}
	return nil
}

func (j *Job) enqueue() error {
	t, err := j.s.q.enqueue()
	if err != nil {
		return &Error{Kind: KindQueueFull, Msg: fmt.Sprintf("the server is busy: %d running (--parallel) and %d waiting (--queue-limit); retry shortly", j.s.q.busy(), j.s.q.limit)}
	}
	j.t = t
	return nil
}

// PromptTokens is the number of prompt tokens.
func (j *Job) PromptTokens() int { return len(j.prompt) }

// Cancel frees the job's place without running it.
func (j *Job) Cancel() { j.t.release() }

// RunChat waits for the job's turn and generates, passing each parsed
// event to onEvent as it becomes certain.
func (j *Job) RunChat(ctx context.Context, onEvent func(chatparse.Event)) (*ChatResult, error) {
	defer j.t.release()
	if err := j.Wait(ctx); err != nil {
		return nil, err
	}
	req := j.chat
	var tools []chatparse.Tool
	if req.ToolChoice != ToolNone {
		tools = parserTools(req.Tools)
	}
	parser := chatparse.New(chatparse.Options{InReasoning: j.think, Tools: tools, NoToolCalls: req.ToolChoice == ToolNone})
	acc := &chatAccumulator{req: req, onEvent: onEvent, parser: parser}
	acc.push(parser.Push(j.forced))
	stops := newStopMatcher(req.Stop)
	g := Generation{Prompt: j.prompt, MaxTokens: j.max, Sampling: req.Sampling, Format: req.Format, FormatAfterThink: req.Format != nil && j.think,
		Tools: j.s.toolPlan(req)}
	out, err := j.generate(ctx, g, func(text string) bool {
		safe, hit := stops.Push(text)
		if safe != "" {
			acc.push(parser.Push(safe))
		}
		return !hit && !acc.limitHit
	})
	if err != nil {
		return nil, engineError(err)
	}
	if rest := stops.Flush(); rest != "" && !acc.limitHit {
		acc.push(parser.Push(rest))
	}
	last := parser.Finish()
	if cut, ok := parser.Unclosed(); ok && out.Finish == FinishLength {
		// A call cut by max_tokens is not a call: its arguments stop
		// mid-value. OpenAI, Anthropic and Responses report the cut
		// (length, max_tokens, incomplete), never a finished call.
		acc.drop(cut)
	}
	acc.push(last)
	res := &ChatResult{Content: acc.content.String(), Reasoning: acc.reasoning.String(), ToolCalls: acc.calls, Outcome: out,
		StopSequence: stops.Matched(),
		Usage:        Usage{PromptTokens: len(j.prompt), CachedTokens: out.CachedTokens, CompletionTokens: out.CompletionTokens}}
	res.Finish = finishReason(out.Finish)
	if len(acc.calls) > 0 && out.Finish != FinishLength {
		res.Finish = "tool_calls"
	}
	return res, nil
}

// RunCompletion waits for the job's turn and generates raw text.
func (j *Job) RunCompletion(ctx context.Context, onText func(string)) (*CompletionResult, error) {
	defer j.t.release()
	if err := j.Wait(ctx); err != nil {
		return nil, err
	}
	var text strings.Builder
	emit := func(s string) {
		if s != "" {
			text.WriteString(s)
			if onText != nil {
				onText(s)
			}
		}
	}
	stops := newStopMatcher(j.comp.Stop)
	if j.comp.Format != nil {
		stops = newStopMatcher(nil) // a stop string could only cut the document
	}
	g := Generation{Prompt: j.prompt, MaxTokens: j.max, Sampling: j.comp.Sampling, Format: j.comp.Format}
	out, err := j.generate(ctx, g, func(t string) bool {
		safe, hit := stops.Push(t)
		emit(safe)
		return !hit
	})
	if err != nil {
		return nil, engineError(err)
	}
	emit(stops.Flush())
	return &CompletionResult{Text: text.String(), Finish: finishReason(out.Finish), Outcome: out,
		Usage: Usage{PromptTokens: len(j.prompt), CachedTokens: out.CachedTokens, CompletionTokens: out.CompletionTokens}}, nil
}

// Started is when the request reached the core (for time to first token).
func (j *Job) Started() time.Time { return j.start }

// QueueWait is how long the job waited from its arrival until its turn
// began: the requests ahead of it, and the rendering and tokenizing of its
// prompt (0 before its turn).
func (j *Job) QueueWait() time.Duration {
	if j.turn.IsZero() {
		return 0
	}
	return j.turn.Sub(j.start)
}

func finishReason(f Finish) string {
	if f == FinishLength {
		return "length"
	}
	return "stop"
}

func engineError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &Error{Kind: KindInternal, Msg: "generation failed: " + err.Error()}
}

// chatAccumulator forwards parsed events, applying tool_choice none and
// parallel_tool_calls=false, and keeps the totals. The events of a call
// still being written are held back until it closes, so a reply cut at
// max_tokens never streams a call it then cannot finish.
type chatAccumulator struct {
	req                *ChatRequest
	onEvent            func(chatparse.Event)
	parser             *chatparse.Parser
	content, reasoning strings.Builder
	calls              []chatparse.ToolCall
	limitHit           bool
	held               []chatparse.Event // the open call's events
	dropped            int               // 1 + the index of the call cut at max_tokens, 0 for none
}

func (a *chatAccumulator) push(evs []chatparse.Event) {
	open, inCall := -1, false
	if a.parser != nil {
		open, inCall = a.parser.OpenCall()
	}
	if len(a.held) > 0 && (!inCall || a.held[0].Index != open) {
		held := a.held
		a.held = nil
		a.forward(held)
	}
	var now []chatparse.Event
	for _, ev := range evs {
		isCall := ev.Kind == chatparse.ToolCallStart || ev.Kind == chatparse.ToolCallArgs
		if isCall && (a.dropped == ev.Index+1 || a.req.ToolChoice == ToolNone) {
			continue
		}
		if isCall && ev.Index >= 1 && !a.req.ParallelToolCalls {
			a.limitHit = true // stop now, not when the second call closes
			continue
		}
		if isCall && inCall && ev.Index == open {
			a.held = append(a.held, ev)
			continue
		}
		now = append(now, ev)
	}
	a.forward(now)
}

// drop discards the call with the given index, held back and still to
// come (the parser's closing of it at Finish).
func (a *chatAccumulator) drop(index int) {
	if len(a.held) > 0 && a.held[0].Index == index {
		a.held = nil
	}
	a.dropped = index + 1
}

func (a *chatAccumulator) forward(evs []chatparse.Event) {
	for _, ev := range evs {
		switch ev.Kind {
		case chatparse.Content:
			a.content.WriteString(ev.Text)
		case chatparse.Reasoning:
			a.reasoning.WriteString(ev.Text)
		case chatparse.ToolCallStart, chatparse.ToolCallArgs:
			if a.req.ToolChoice == ToolNone {
				continue // documented: no tool calls ever
			}
			if ev.Index >= 1 && !a.req.ParallelToolCalls {
				a.limitHit = true
				continue
			}
			if ev.Kind == chatparse.ToolCallStart {
				a.calls = append(a.calls, chatparse.ToolCall{ID: ev.ID, Name: ev.Name})
			} else if n := len(a.calls); n > 0 {
				a.calls[n-1].Arguments += ev.Text
			}
		}
		if a.onEvent != nil && (ev.Text != "" || ev.Kind == chatparse.ToolCallStart) {
			a.onEvent(ev)
		}
	}
}

// RequestLog is one request's log record.
type RequestLog struct {
	Time             time.Time `json:"time"`
	Endpoint         string    `json:"endpoint"`
	Model            string    `json:"model,omitempty"` // the model that served it
	Status           int       `json:"status"`
	Stream           bool      `json:"stream"`
	PromptTokens     int       `json:"prompt_tokens"`
	CachedTokens     int       `json:"cached_tokens"`
	CompletionTokens int       `json:"completion_tokens"`
	PrefillTokS      float64   `json:"prefill_tok_s"`
	DecodeTokS       float64   `json:"decode_tok_s"`
	QueueSeconds     float64   `json:"queue_wait_s"` // from arrival until the request's turn began
	TTFTSeconds      float64   `json:"ttft_s"`
	TotalSeconds     float64   `json:"total_s"`
	Finish           string    `json:"finish_reason,omitempty"`
	// MaxTokensAsked is the request's max_tokens when the server lowered
	// it to MaxTokens, what fits the context (0: not lowered).
	MaxTokensAsked int    `json:"max_tokens_asked,omitempty"`
	MaxTokens      int    `json:"max_tokens,omitempty"`
	Error          string `json:"error,omitempty"`
}

// Fill sets the token and timing fields from a finished generation.
func (r *RequestLog) Fill(u Usage, o Outcome, finish string) {
	r.PromptTokens, r.CachedTokens, r.CompletionTokens, r.Finish = u.PromptTokens, u.CachedTokens, u.CompletionTokens, finish
	if s := o.Prefill.Seconds(); s > 0 {
		r.PrefillTokS = float64(u.PromptTokens-u.CachedTokens) / s
	}
	if s := o.Decode.Seconds(); s > 0 && u.CompletionTokens > 1 {
		r.DecodeTokS = float64(u.CompletionTokens-1) / s
	}
}

// Finished sets what the log line says of the job that answered: the
// tokens and speeds, the model, and the time to the first token from the
// request's arrival (the queue wait included), and the queue wait.
func (r *RequestLog) Finished(job *Job, u Usage, o Outcome, finish string) {
	r.Fill(u, o, finish)
	r.Model = job.Model()
	r.QueueSeconds = job.QueueWait().Seconds()
	if job.clampedFrom > 0 {
		r.MaxTokensAsked, r.MaxTokens = job.clampedFrom, job.max
	}
	if o.FirstToken > 0 {
		r.TTFTSeconds = (time.Since(job.Started()) - o.Decode - o.Prefill + o.FirstToken).Seconds()
	}
}

// TextLogger writes one human-readable line per request.
func TextLogger(w io.Writer) func(RequestLog) {
	var mu sync.Mutex
	return func(r RequestLog) {
		mu.Lock()
		defer mu.Unlock()
		endpoint := r.Endpoint
		if strings.ContainsFunc(endpoint, unicode.IsControl) {
			// The path is the client's: a line feed in it (%0A) must not
			// start a forged log line, nor an escape sequence reach a
			// terminal.
			endpoint = fmt.Sprintf("%q", endpoint)
		}
		line := fmt.Sprintf("%s %s %d prompt=%d cached=%d completion=%d prefill=%.1ftok/s decode=%.1ftok/s queue=%.3fs ttft=%.3fs total=%.3fs finish=%s",
			r.Time.UTC().Format(time.RFC3339), endpoint, r.Status, r.PromptTokens, r.CachedTokens, r.CompletionTokens,
			r.PrefillTokS, r.DecodeTokS, r.QueueSeconds, r.TTFTSeconds, r.TotalSeconds, orDash(r.Finish))
		if r.Model != "" {
			line += " model=" + r.Model
		}
		if r.MaxTokensAsked > 0 {
			line += fmt.Sprintf(" max_tokens=%d→%d(context)", r.MaxTokensAsked, r.MaxTokens)
		}
		if r.Error != "" {
			line += fmt.Sprintf(" error=%q", r.Error)
		}
		fmt.Fprintln(w, line)
	}
}

// JSONLogger writes one JSON object per request (--log-json).
func JSONLogger(w io.Writer) func(RequestLog) {
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	return func(r RequestLog) {
		mu.Lock()
		defer mu.Unlock()
		enc.Encode(r)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

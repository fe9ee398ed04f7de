// Package chatparse splits a model's generated text into reasoning, answer
// text and tool calls (the Qwen3-Coder XML dialect the Qwen3.5/3.6
// templates ask for), incrementally as tokens arrive.
//
// The parse is a function of the whole text alone: however the text is cut
// into Push calls, the events concatenate to the same Result. Text is held
// back only while it may still turn out to be markup (a partial "<tool_ca",
// a "</parameter>" whose lookahead is not yet in, a newline that may frame
// a value); docs/templates.md states the rules.
package chatparse

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Kind says what an Event carries.
type Kind int

const (
	Content       Kind = iota // Text is answer text
	Reasoning                 // Text is reasoning (between <think> and </think>)
	ToolCallStart             // a new call: Index, ID, Name
	ToolCallArgs              // Index, Text: a fragment of the call's JSON arguments
)

// Event is one piece of parsed output. The ToolCallArgs fragments of a call,
// concatenated, are exactly that call's Arguments in the final result.
type Event struct {
	Kind  Kind
	Text  string
	Index int    // tool calls: 0, 1, … in order of appearance
	ID    string // ToolCallStart: "call_…"
	Name  string // ToolCallStart: the function name
}

// Tool is what the parser needs of a tool definition: its name and the JSON
// schema of its parameters (values are typed by it: a "string" parameter
// stays a string, others are decoded as JSON or Python literals).
type Tool struct {
	Name       string
	Parameters json.RawMessage
}

// Options configures a Parser.
type Options struct {
	// InReasoning is true when the prompt ended inside <think> (thinking
	// on): output is reasoning until </think>.
	InReasoning bool
	Tools       []Tool
	// NoToolCalls parses no calls: tool-call markup is text (tool_choice
	// "none", or a request without tools that should not get calls).
	NoToolCalls bool
	// NewID makes tool-call ids; default "call_" + random hex.
	NewID func() string
}

// ToolCall is one complete call.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // a JSON object
}

// Result is the whole parsed output.
type Result struct {
	Content   string
	Reasoning string
	ToolCalls []ToolCall
}

type state int

const (
	stStart          state = iota // not in reasoning: is there a <think>?
	stReasoningStart              // drop leading newlines of the reasoning
	stReasoning
	stContentStart // drop leading newlines of the answer
	stContent
	stCallBody      // between <function=…> / </parameter> and the next tag
	stValueStart    // right after <parameter=…>: drop one newline
	stValue         // inside a parameter value
	stAfterFunction // after </function>: expect </tool_call>
	stAfterCall     // after a call: drop whitespace
)

// Parser consumes generated text piece by piece. It is not safe for
// concurrent use.
type Parser struct {
	opt   Options
	tools map[string]toolSchema
	// The result so far; text in builders, as += on every token would copy
	// the whole reasoning each time.
	content, reasoning strings.Builder
	calls              []ToolCall

	st      state
	buf     string // text received and not yet consumed
	partial string // an incomplete UTF-8 sequence at the end of a Push
	events  []Event

	call     *openCall
	value    *openValue
	unclosed int // 1 + the index of the call Finish had to close, 0 for none
}

// openCall is the call being parsed.
type openCall struct {
	index  int
	schema toolSchema
	used   map[string]bool
	params int // parameters written into the arguments so far
	args   strings.Builder
}

// openValue is the parameter value being parsed.
type openValue struct {
	name   string
	types  typeSet
	stream bool // a string parameter: its text is written as it arrives
	drop   bool // a repeated parameter: the first one wins
	text   strings.Builder
	// atLineStart: the last consumed value byte was a newline (or the value
	// began after its framing newline), for the line-start rules.
	atLineStart bool
}

// New returns a parser.
func New(opt Options) *Parser {
	p := &Parser{opt: opt, tools: schemas(opt.Tools)}
	if opt.NewID == nil {
		p.opt.NewID = randomID
	}
	if opt.InReasoning {
		p.st = stReasoningStart
	}
	return p
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// Push consumes the next piece of text (whole UTF-8 characters) and returns
// the events that became certain. Text that may still turn out to be markup
// is held back until it can be classified. A piece that ends inside a UTF-8
// character is accepted too: the incomplete bytes wait for the next piece.
func (p *Parser) Push(text string) []Event {
	text = p.partial + text
	p.partial = ""
	if cut := incompleteSuffix(text); cut > 0 {
		p.partial = text[len(text)-cut:]
		text = text[:len(text)-cut]
	}
	p.buf += text
	p.run(false)
	return p.take()
}

// Finish is called at the end of generation: it flushes what was held back
// (an unclosed call is completed as far as it parsed) and returns the last
// events. Push the generated text without its stop token (<|im_end|>).
func (p *Parser) Finish() []Event {
	p.buf += p.partial
	p.partial = ""
	p.run(true)
	if p.call != nil {
		p.unclosed = p.call.index + 1
	}
	if p.value != nil {
		p.endValue(trimCutTag(p.buf))
		p.buf = ""
	}
	if p.call != nil {
		p.closeCall()
	}
	p.buf = ""
	return p.take()
}

// OpenCall is the index of the call being parsed (its <tool_call> opened,
// its arguments not yet closed), ok false when none is. A server that
// stops at max_tokens uses it to tell an unfinished call from finished ones.
func (p *Parser) OpenCall() (index int, ok bool) {
	if p.call == nil {
		return 0, false
	}
	return p.call.index, true
}

// Unclosed is, after Finish, the index of the call the output ended
// inside (no </tool_call> or </function> closed it: Finish closed it with
// the arguments parsed so far), ok false when none did.
func (p *Parser) Unclosed() (index int, ok bool) {
	return p.unclosed - 1, p.unclosed > 0
}

// Result is everything parsed so far.
func (p *Parser) Result() Result {
	r := Result{Content: p.content.String(), Reasoning: p.reasoning.String()}
	r.ToolCalls = append([]ToolCall(nil), p.calls...)
	if p.call != nil {
		// The open call's arguments so far (not yet a whole object).
		r.ToolCalls[len(r.ToolCalls)-1].Arguments = p.call.args.String()
	}
	return r
}

func (p *Parser) take() []Event {
	ev := p.events
	p.events = nil
	return ev
}

// emit records an event, merging it into the previous one of the same kind.
func (p *Parser) emit(e Event) {
	switch e.Kind {
	case Content:
		p.content.WriteString(e.Text)
	case Reasoning:
		p.reasoning.WriteString(e.Text)
	case ToolCallStart:
		p.calls = append(p.calls, ToolCall{ID: e.ID, Name: e.Name})
	case ToolCallArgs:
		p.call.args.WriteString(e.Text)
	}
	if e.Kind != ToolCallStart && e.Text == "" {
		return
	}
	if n := len(p.events); n > 0 && e.Kind != ToolCallStart {
		last := &p.events[n-1]
		if last.Kind == e.Kind && last.Index == e.Index {
			last.Text += e.Text
			return
		}
	}
	p.events = append(p.events, e)
}

// run consumes p.buf as far as it can be classified; with final, all of it.
func (p *Parser) run(final bool) {
	for p.step(final) {
	}
}

// step advances by one decision; false when it needs more text.
func (p *Parser) step(final bool) bool {
	sc := scan{s: p.buf, final: final}
	switch p.st {
	case stStart:
		return p.stepStart(sc)
	case stReasoningStart, stContentStart:
		return p.stepDropNewlines(sc)
	case stReasoning:
		return p.stepText(sc, Reasoning)
	case stContent:
		return p.stepText(sc, Content)
	case stCallBody:
		return p.stepCallBody(sc)
	case stValueStart:
		return p.stepValueStart(sc)
	case stValue:
		return p.stepValue(sc)
	case stAfterFunction:
		return p.stepAfterFunction(sc)
	case stAfterCall:
		return p.stepAfterCall(sc)
	}
	return false
}

func (p *Parser) consume(n int) { p.buf = p.buf[n:] }

// stepStart: without a prompt-side <think>, output that opens with <think>
// (after whitespace) is reasoning.
func (p *Parser) stepStart(sc scan) bool {
	j, st := sc.ws(0)
	if st == yes {
		j, st = sc.lit(j, "<think>")
	}
	switch st {
	case partial:
		return false
	case yes:
		p.consume(j)
		p.st = stReasoningStart
	default:
		p.st = stContentStart
	}
	return true
}

func (p *Parser) stepDropNewlines(sc scan) bool {
	n := len(sc.s) - len(strings.TrimLeft(sc.s, "\n"))
	p.consume(n)
	if n == len(sc.s) && !sc.final {
		return false
	}
	if p.st == stReasoningStart {
		p.st = stReasoning
	} else {
		p.st = stContent
	}
	return true
}

// stepText emits reasoning or answer text up to the next markup: </think>
// (in reasoning) or a tool call's opening (<tool_call> then <function=NAME>),
// which in reasoning also ends the reasoning, as Qwen3.5/3.6 sometimes open
// a call without closing </think>.
func (p *Parser) stepText(sc scan, kind Kind) bool {
	for i := strings.IndexByte(sc.s, '<'); i >= 0; i = nextByte(sc.s, '<', i+1) {
		end, name, st := sc.opener(i)
		if p.opt.NoToolCalls {
			st = no
		}
		if kind == Reasoning && st == no {
			if end, st = sc.lit(i, "</think>"); st == yes {
				p.emit(Event{Kind: kind, Text: sc.s[:i]})
				p.consume(end)
				p.st = stContentStart
				return true
			}
		}
		switch st {
		case partial:
			p.emit(Event{Kind: kind, Text: sc.s[:i]})
			p.consume(i)
			return false
		case yes:
			p.emit(Event{Kind: kind, Text: sc.s[:i]})
			p.consume(end)
			p.openCall(name)
			return true
		}
	}
	p.emit(Event{Kind: kind, Text: sc.s})
	p.consume(len(sc.s))
	return false
}

func nextByte(s string, c byte, from int) int {
	if from >= len(s) {
		return -1
	}
	if i := strings.IndexByte(s[from:], c); i >= 0 {
		return from + i
	}
	return -1
}

func (p *Parser) openCall(name string) {
	p.call = &openCall{index: len(p.calls), schema: p.tools[name], used: map[string]bool{}}
	p.emit(Event{Kind: ToolCallStart, Index: p.call.index, ID: p.opt.NewID(), Name: name})
	p.emit(Event{Kind: ToolCallArgs, Index: p.call.index, Text: "{"})
	p.st = stCallBody
}

func (p *Parser) closeCall() {
	p.emit(Event{Kind: ToolCallArgs, Index: p.call.index, Text: "}"})
	p.calls[p.call.index].Arguments = p.call.args.String()
	p.call = nil
	p.st = stAfterCall
}

// stepCallBody reads the next <parameter=NAME>, </function> or
// </tool_call>; anything else between them is dropped.
func (p *Parser) stepCallBody(sc scan) bool {
	i := len(sc.s) - len(strings.TrimLeft(sc.s, spaces))
	if i == len(sc.s) {
		p.consume(i)
		if sc.final {
			p.unclosed = p.call.index + 1 // the output ended before </function>
			p.closeCall()
			return true
		}
		return false
	}
	if sc.s[i] != '<' {
		j := nextByte(sc.s, '<', i)
		if j < 0 {
			j = len(sc.s)
		}
		p.consume(j) // not markup: dropped
		return true
	}
	if end, name, st := sc.paramOpener(i); st != no {
		if st == partial {
			p.consume(i)
			return false
		}
		p.consume(end)
		p.openValue(name)
		return true
	}
	if end, st := sc.lit(i, "</function>"); st != no {
		p.consume(i)
		if st == partial {
			return false
		}
		p.consume(end - i)
		p.st = stAfterFunction
		return true
	}
	if end, st := sc.lit(i, "</tool_call>"); st != no {
		p.consume(i)
		if st == partial {
			return false
		}
		p.consume(end - i)
		p.closeCall()
		return true
	}
	p.consume(i + 1) // a stray '<'
	return true
}

func (p *Parser) openValue(name string) {
	c := p.call
	v := &openValue{name: name, types: c.schema.params[name], drop: c.used[name]}
	c.used[name] = true
	v.stream = v.types.stringOnly() && !v.drop
	if v.stream {
		p.emit(Event{Kind: ToolCallArgs, Index: c.index, Text: p.keyPrefix() + jsonString(name) + `:"`})
	}
	p.value = v
	p.st = stValueStart
}

// keyPrefix is the separator before the next key of the arguments object.
func (p *Parser) keyPrefix() string {
	p.call.params++
	if p.call.params > 1 {
		return ","
	}
	return ""
}

func (p *Parser) stepValueStart(sc scan) bool {
	if len(sc.s) == 0 && !sc.final {
		return false
	}
	if strings.HasPrefix(sc.s, "\n") {
		p.consume(1)
		p.value.atLineStart = true
	}
	p.st = stValue
	return true
}

// stepValue consumes value text up to its end (see valueEnd), holding back
// a possible terminator and the newline that would precede it.
func (p *Parser) stepValue(sc scan) bool {
	v := p.value
	for i := strings.IndexByte(sc.s, '<'); i >= 0; i = nextByte(sc.s, '<', i+1) {
		lineStart := (i == 0 && v.atLineStart) || (i > 0 && sc.s[i-1] == '\n')
		term, end, st := sc.valueEnd(i, lineStart, p.acceptParam)
		switch st {
		case partial:
			p.valueText(sc.s[:i], true)
			return false
		case yes:
			p.endValue(sc.s[:i])
			p.consume(end)
			p.afterValue(term)
			return true
		}
	}
	if sc.final {
		return false // Finish ends the value at the end of the output
	}
	p.valueText(sc.s, true)
	return false
}

// valueText adds text that is certainly part of the value, except a final
// newline when hold is set (it frames the value if a terminator follows).
func (p *Parser) valueText(s string, hold bool) {
	if hold && strings.HasSuffix(s, "\n") {
		s = s[:len(s)-1]
	}
	if s == "" {
		return
	}
	p.consume(len(s))
	v := p.value
	v.atLineStart = strings.HasSuffix(s, "\n")
	if v.stream {
		p.emit(Event{Kind: ToolCallArgs, Index: p.call.index, Text: jsonStringBody(s)})
		return
	}
	v.text.WriteString(s)
}

// endValue ends the value with its last text s (not yet consumed), less the
// newline that frames it, and writes it into the arguments.
func (p *Parser) endValue(s string) {
	s = strings.TrimSuffix(s, "\n")
	v := p.value
	c := p.call
	switch {
	case v.drop:
	case v.stream:
		p.emit(Event{Kind: ToolCallArgs, Index: c.index, Text: jsonStringBody(s) + `"`})
	default:
		v.text.WriteString(s)
		p.emit(Event{Kind: ToolCallArgs, Index: c.index, Text: p.keyPrefix() + jsonString(v.name) + ":" + coerce(v.text.String(), v.types)})
	}
	p.value = nil
}

func (p *Parser) afterValue(t terminator) {
	switch t {
	case endNextParam, endParamClose:
		p.st = stCallBody
	case endFunction:
		p.st = stAfterFunction
	case endCall:
		p.closeCall()
	}
}

// acceptParam says whether a <parameter=NAME> inside a value may start the
// next parameter: one of the tool's parameters not given yet (any unused
// name when the tool's schema names none).
func (p *Parser) acceptParam(name string) bool {
	c := p.call
	if c.used[name] {
		return false
	}
	if c.schema.params == nil {
		return true
	}
	_, ok := c.schema.params[name]
	return ok
}

func (p *Parser) stepAfterFunction(sc scan) bool {
	i, st := sc.ws(0)
	if st == partial {
		return false
	}
	end, st := sc.lit(i, "</tool_call>")
	switch st {
	case partial:
		return false
	case yes:
		p.consume(end)
	default:
		p.consume(i) // no </tool_call>: the call ends here anyway
	}
	p.closeCall()
	return true
}

func (p *Parser) stepAfterCall(sc scan) bool {
	n := len(sc.s) - len(strings.TrimLeft(sc.s, spaces))
	p.consume(n)
	if n == len(sc.s) {
		return false
	}
	p.st = stContent
	return true
}

// trimCutTag drops the start of a closing tag that generation stopped in
// ("…\n</param") from the end of a value.
func trimCutTag(s string) string {
	i := strings.LastIndexByte(s, '<')
	if i < 0 || len(s)-i < 2 {
		return s
	}
	for _, tag := range []string{"</parameter>", "</function>", "</tool_call>"} {
		if strings.HasPrefix(tag, s[i:]) {
			return s[:i]
		}
	}
	return s
}

// incompleteSuffix is the length of an incomplete UTF-8 sequence ending s.
func incompleteSuffix(s string) int {
	for n := 1; n <= utf8.UTFMax-1 && n <= len(s); n++ {
		c := s[len(s)-n]
		if c < 0x80 {
			return 0
		}
		if utf8.RuneStart(c) {
			if utf8.FullRuneInString(s[len(s)-n:]) {
				return 0
			}
			return n
		}
	}
	return 0
}

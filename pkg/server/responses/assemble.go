package responses

import (
	"strings"

	"github.com/nvmai/nvmai/pkg/chatparse"
)

// eventJSON is one streamed event; which fields are set depends on Type.
type eventJSON struct {
	Type           string        `json:"type"`
	SequenceNumber int           `json:"sequence_number"`
	Response       *responseJSON `json:"response,omitempty"`
	OutputIndex    *int          `json:"output_index,omitempty"`
	ItemID         string        `json:"item_id,omitempty"`
	ContentIndex   *int          `json:"content_index,omitempty"`
	Item           *outputItem   `json:"item,omitempty"`
	Part           *partJSON     `json:"part,omitempty"`
	Delta          *string       `json:"delta,omitempty"`
	Text           *string       `json:"text,omitempty"`
	Name           string        `json:"name,omitempty"`
	Arguments      *string       `json:"arguments,omitempty"`
	Logprobs       *[]string     `json:"logprobs,omitempty"`
	// the error event
	Code    *string `json:"code,omitempty"`
	Message string  `json:"message,omitempty"`
	Param   *string `json:"param,omitempty"`
}

// assembler turns the core's parsed events into output items, and, when
// emit is set, into the stream's item events as they happen. Streamed or
// not, the output is built the same way, so both agree.
type assembler struct {
	newID func(prefix string) string
	emit  func(eventJSON) // nil: not streaming
	items []outputItem
	cur   *openItem
	// reasoningSteps counts the events that carried reasoning: one per
	// generated token, except tokens held back (a partial tag or stop
	// string) that arrive merged with the next; the </think> token is not
	// counted. It is reported as reasoning_tokens.
	reasoningSteps int
}

type openItem struct {
	kind   chatparse.Kind // Reasoning, Content or ToolCallStart
	index  int
	id     string
	callID string
	name   string
	text   strings.Builder
}

func ptr[T any](v T) *T { return &v }

func (a *assembler) send(ev eventJSON) {
	if a.emit != nil {
		a.emit(ev)
	}
}

// event takes one parsed event, closing the open item when the kind of
// output changes.
func (a *assembler) event(ev chatparse.Event) {
	kind := ev.Kind
	if kind == chatparse.ToolCallArgs {
		kind = chatparse.ToolCallStart
	}
	if a.cur != nil && (a.cur.kind != kind || ev.Kind == chatparse.ToolCallStart) {
		a.close()
	}
	if a.cur == nil {
		if ev.Kind == chatparse.ToolCallArgs {
			return // arguments of a call that was dropped (parallel_tool_calls)
		}
		a.open(ev)
	}
	switch ev.Kind {
	case chatparse.Reasoning:
		a.reasoningSteps++
		a.delta("response.reasoning_text.delta", ev.Text)
	case chatparse.Content:
		a.delta("response.output_text.delta", ev.Text)
	case chatparse.ToolCallArgs:
		a.delta("response.function_call_arguments.delta", ev.Text)
	}
}

func (a *assembler) open(ev chatparse.Event) {
	c := &openItem{kind: ev.Kind, index: len(a.items)}
	var it outputItem
	switch ev.Kind {
	case chatparse.Reasoning:
		c.id = a.newID("rs_")
		it = reasoningItem(c.id, "", false)
	case chatparse.Content:
		c.id = a.newID("msg_")
		it = messageItem(c.id, "", false)
	case chatparse.ToolCallStart:
		c.id, c.callID, c.name = a.newID("fc_"), ev.ID, ev.Name
		it = callItem(c.id, c.callID, c.name, "", false)
	}
	a.cur = c
	a.send(eventJSON{Type: "response.output_item.added", OutputIndex: ptr(c.index), Item: &it})
	switch ev.Kind {
	case chatparse.Reasoning:
		a.send(eventJSON{Type: "response.content_part.added", ItemID: c.id, OutputIndex: ptr(c.index), ContentIndex: ptr(0), Part: &partJSON{Type: "reasoning_text"}})
	case chatparse.Content:
		p := outputTextPart("")
		p.Logprobs = nil
		a.send(eventJSON{Type: "response.content_part.added", ItemID: c.id, OutputIndex: ptr(c.index), ContentIndex: ptr(0), Part: &p})
	}
}

func (a *assembler) delta(typ, text string) {
	if text == "" {
		return
	}
	c := a.cur
	c.text.WriteString(text)
	ev := eventJSON{Type: typ, ItemID: c.id, OutputIndex: ptr(c.index), Delta: ptr(text)}
	switch c.kind {
	case chatparse.Content:
		ev.ContentIndex, ev.Logprobs = ptr(0), &[]string{}
	case chatparse.Reasoning:
		ev.ContentIndex = ptr(0)
	}
	a.send(ev)
}

// close finishes the open item: its done events, then the item.
func (a *assembler) close() {
	c := a.cur
	if c == nil {
		return
	}
	a.cur = nil
	text := c.text.String()
	base := eventJSON{ItemID: c.id, OutputIndex: ptr(c.index)}
	var it outputItem
	switch c.kind {
	case chatparse.Reasoning:
		it = reasoningItem(c.id, text, true)
		ev := base
		ev.Type, ev.ContentIndex, ev.Text = "response.reasoning_text.done", ptr(0), ptr(text)
		a.send(ev)
		ev = base
		ev.Type, ev.ContentIndex, ev.Part = "response.content_part.done", ptr(0), &partJSON{Type: "reasoning_text", Text: text}
		a.send(ev)
	case chatparse.Content:
		it = messageItem(c.id, text, true)
		ev := base
		ev.Type, ev.ContentIndex, ev.Text, ev.Logprobs = "response.output_text.done", ptr(0), ptr(text), &[]string{}
		a.send(ev)
		p := outputTextPart(text)
		p.Logprobs = nil
		ev = base
		ev.Type, ev.ContentIndex, ev.Part = "response.content_part.done", ptr(0), &p
		a.send(ev)
	case chatparse.ToolCallStart:
		it = callItem(c.id, c.callID, c.name, text, true)
		ev := base
		ev.Type, ev.Name, ev.Arguments = "response.function_call_arguments.done", c.name, it.Arguments
		a.send(ev)
	}
	a.items = append(a.items, it)
	a.send(eventJSON{Type: "response.output_item.done", OutputIndex: ptr(c.index), Item: &it})
}

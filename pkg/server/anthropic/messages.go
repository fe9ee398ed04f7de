package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/nvmai/nvmai/pkg/chatparse"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/sse"
)

// contentBlock is a response content block: text {text}, thinking
// {thinking, signature} or tool_use {id, name, input}.
type contentBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

type usageJSON struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// usage reports Anthropic's split: input_tokens are the prompt tokens not
// read from the prompt cache, cache_read_input_tokens those that were
// (their sum is the prompt). The cache is filled as a side effect of every
// request, so nothing counts as a separate cache creation.
func usage(u server.Usage) usageJSON {
	return usageJSON{InputTokens: u.PromptTokens - u.CachedTokens, CacheReadInputTokens: u.CachedTokens, OutputTokens: u.CompletionTokens}
}

type messageJSON struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // "message"
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []contentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        usageJSON      `json:"usage"`
}

// stopReason maps the core's result onto Anthropic's stop_reason and
// stop_sequence.
func stopReason(res *server.ChatResult) (string, *string) {
	switch {
	case res.Finish == "length":
		return "max_tokens", nil // cut, even after finished calls, as Anthropic says
	case len(res.ToolCalls) > 0:
		return "tool_use", nil
	case res.StopSequence != "":
		s := res.StopSequence
		return "stop_sequence", &s
	}
	return "end_turn", nil
}

// assembler turns the core's parsed events into content blocks, in the
// order the model wrote them: a run of reasoning is a thinking block
// (signed when it closes), a run of text a text block, each call a
// tool_use block. The same assembler builds the non-streamed content and,
// with emit set, the stream's block events, so both agree.
type assembler struct {
	sign   func(string) string
	emit   func(event string, v any) // nil: not streaming
	blocks []contentBlock
	open   bool
	text   strings.Builder // the open block's text or arguments
	index  int             // the open tool call's index in the core's events
}

type blockStart struct {
	Type         string       `json:"type"`
	Index        int          `json:"index"`
	ContentBlock contentBlock `json:"content_block"`
}

type blockDelta struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
	Delta delta  `json:"delta"`
}

type delta struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	Thinking    *string `json:"thinking,omitempty"`
	Signature   *string `json:"signature,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

type blockStop struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
}

// blockType is the type of block an event's text belongs to.
func blockType(k chatparse.Kind) string {
	switch k {
	case chatparse.Reasoning:
		return "thinking"
	case chatparse.Content:
		return "text"
	}
	return "tool_use"
}

func (a *assembler) push(ev chatparse.Event) {
	if ev.Kind == chatparse.ToolCallStart || !a.open || a.current().Type != blockType(ev.Kind) || (ev.Kind == chatparse.ToolCallArgs && ev.Index != a.index) {
		if ev.Kind == chatparse.ToolCallArgs {
			return // arguments of a call never started: nothing to attach to
		}
		a.start(ev)
	}
	a.text.WriteString(ev.Text)
	var d delta
	switch ev.Kind {
	case chatparse.Reasoning:
		d = delta{Type: "thinking_delta", Thinking: &ev.Text}
	case chatparse.Content:
		d = delta{Type: "text_delta", Text: &ev.Text}
	case chatparse.ToolCallArgs:
		d = delta{Type: "input_json_delta", PartialJSON: &ev.Text}
	default:
		return
	}
	if a.emit != nil && ev.Text != "" {
		a.emit("content_block_delta", blockDelta{Type: "content_block_delta", Index: len(a.blocks) - 1, Delta: d})
	}
}

func (a *assembler) current() *contentBlock { return &a.blocks[len(a.blocks)-1] }

func (a *assembler) start(ev chatparse.Event) {
	a.close()
	empty := ""
	var b contentBlock
	switch ev.Kind {
	case chatparse.Reasoning:
		b = contentBlock{Type: "thinking", Thinking: &empty, Signature: &empty}
	case chatparse.Content:
		b = contentBlock{Type: "text", Text: &empty}
	case chatparse.ToolCallStart:
		b = contentBlock{Type: "tool_use", ID: toolUseID(ev.ID), Name: ev.Name, Input: json.RawMessage("{}")}
		a.index = ev.Index
	}
	a.blocks = append(a.blocks, b)
	a.open = true
	a.text.Reset()
	if a.emit != nil {
		a.emit("content_block_start", blockStart{Type: "content_block_start", Index: len(a.blocks) - 1, ContentBlock: b})
	}
}

// close finishes the open block: a thinking block gets its signature, a
// tool_use block its parsed input.
func (a *assembler) close() {
	if !a.open {
		return
	}
	a.open = false
	b, i, text := a.current(), len(a.blocks)-1, a.text.String()
	switch b.Type {
	case "thinking":
		sig := a.sign(text)
		b.Thinking, b.Signature = &text, &sig
		if a.emit != nil {
			a.emit("content_block_delta", blockDelta{Type: "content_block_delta", Index: i, Delta: delta{Type: "signature_delta", Signature: &sig}})
		}
	case "text":
		b.Text = &text
	case "tool_use":
		if strings.TrimSpace(text) != "" && json.Valid([]byte(text)) {
			b.Input = json.RawMessage(text)
		}
	}
	if a.emit != nil {
		a.emit("content_block_stop", blockStop{Type: "content_block_stop", Index: i})
	}
}

func (a *assembler) content() []contentBlock {
	if a.blocks == nil {
		return []contentBlock{}
	}
	return a.blocks
}

func (a *Adapter) messages(w http.ResponseWriter, r *http.Request, log *server.RequestLog) error {
	req, creq, err := a.decode(w, r, false)
	if err != nil {
		return err
	}
	log.Stream = req.Stream
	job, err := a.s.PrepareChat(creq)
	if err != nil {
		return err
	}
	// With --models-dir, a stream starts only once its model is loaded, so
	// that a load failure is answered with its status, not inside a 200.
	if req.Stream && job.NeedsLoad() {
		if err := job.Wait(r.Context()); err != nil {
			return err
		}
	}
	msg := messageJSON{ID: a.s.NewID("msg_"), Type: "message", Role: "assistant", Model: job.Model(), Content: []contentBlock{}}
	if !req.Stream {
		asm := &assembler{sign: a.signer.sign}
		res, err := job.RunChat(r.Context(), asm.push)
		if err != nil {
			return err
		}
		asm.close()
		reason, seq := stopReason(res)
		log.Finished(job, res.Usage, res.Outcome, reason)
		msg.Content, msg.StopReason, msg.StopSequence, msg.Usage = asm.content(), &reason, seq, usage(res.Usage)
		return httpapi.WriteJSON(w, http.StatusOK, msg)
	}
	return a.stream(w, r, log, job, msg)
}

type messageStart struct {
	Type    string      `json:"type"`
	Message messageJSON `json:"message"`
}

type messageDelta struct {
	Type  string `json:"type"`
	Delta struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage usageJSON `json:"usage"`
}

type typeOnly struct {
	Type string `json:"type"`
}

// stream runs the job as Anthropic's event stream: message_start before
// the queue wait and prefill (pings keep it alive), the content blocks as
// the model writes them, then message_delta and message_stop.
func (a *Adapter) stream(w http.ResponseWriter, r *http.Request, log *server.RequestLog, job *server.Job, msg messageJSON) error {
	st := sse.Start(w, r, a.opt.KeepAlive, pingEvent)
	defer st.Close()
	// The prompt's size is known now; how much of it the cache holds only
	// after the prefill, so message_delta carries the final split.
	msg.Usage = usageJSON{InputTokens: job.PromptTokens(), OutputTokens: 1}
	st.Event("message_start", messageStart{Type: "message_start", Message: msg})
	asm := &assembler{sign: a.signer.sign, emit: st.Event}
	res, err := job.RunChat(r.Context(), asm.push)
	if err != nil {
		st.StopKeepAlive()
		if errors.Is(err, context.Canceled) {
			return err // the client is gone
		}
		_, d := classify(err)
		st.Event("error", errorBody{Type: "error", Error: d})
		return err
	}
	asm.close()
	st.StopKeepAlive()
	reason, seq := stopReason(res)
	log.Finished(job, res.Usage, res.Outcome, reason)
	md := messageDelta{Type: "message_delta", Usage: usage(res.Usage)}
	md.Delta.StopReason, md.Delta.StopSequence = reason, seq
	st.Event("message_delta", md)
	st.Event("message_stop", typeOnly{Type: "message_stop"})
	return nil
}

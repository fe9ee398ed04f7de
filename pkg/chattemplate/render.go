package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/ardanlabs/jinja"
)

// raised is what the template's raise_exception returns, so Render can tell
// the template's own message from an engine error.
type raised struct{ msg string }

func (r *raised) Error() string { return r.msg }

// raiseException is transformers' raise_exception global: it raises a
// TemplateError carrying the template's message.
var raiseException = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), &raised{msg: "raise_exception called without a message"}
	}
	msg := args[0].String()
	if args[0].IsString() {
		msg = args[0].AsString()
	}
	return jinja.Undefined(), &raised{msg: msg}
})

// reservedVars are the variables apply_chat_template sets itself; Python
// refuses a kwarg of the same name (a duplicate keyword argument).
var reservedVars = []string{"messages", "tools", "documents", "add_generation_prompt"}

// Render renders in. A *RenderError means the conversation is at fault.
func (t *Template) Render(in Input) (string, error) {
	data, err := t.variables(in)
	if err != nil {
		return "", err
	}
	return t.execute(data)
}

// execute runs the engine, mapping its failures (and panics, which an
// unforeseen template or input might cause) to *RenderError.
func (t *Template) execute(data map[string]jinja.Value) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", &RenderError{Msg: fmt.Sprintf("template engine failed: %v", r)}
		}
	}()
	out, err = t.tmpl.RenderValues(data)
	if err != nil {
		var r *raised
		if errors.As(err, &r) {
			return "", &RenderError{Msg: r.msg}
		}
		return "", &RenderError{Msg: err.Error()}
	}
	return out, nil
}

// variables builds the context transformers passes: messages, tools,
// documents, add_generation_prompt, the special tokens and the kwargs.
func (t *Template) variables(in Input) (map[string]jinja.Value, error) {
	data := map[string]jinja.Value{
		"raise_exception": raiseException,
	}
	for k, v := range t.specials {
		data[k] = v
	}
	for k, v := range in.Kwargs {
		for _, r := range reservedVars {
			if k == r {
				return nil, &RenderError{Msg: fmt.Sprintf("template variable %q cannot be set by chat_template_kwargs", k)}
			}
		}
		val, err := goValue(v, 0)
		if err != nil {
			return nil, &RenderError{Msg: fmt.Sprintf("chat_template_kwargs[%q]: %v", k, err)}
		}
		data[k] = val
	}
	msgs, err := messageValues(in.Messages)
	if err != nil {
		return nil, err
	}
	data["messages"] = msgs
	data["tools"] = jinja.None()
	if in.Tools != nil {
		tools := make([]jinja.Value, len(in.Tools))
		for i, raw := range in.Tools {
			if tools[i], err = decodeJSON(raw); err != nil {
				return nil, &RenderError{Msg: fmt.Sprintf("tools[%d]: %v", i, err)}
			}
		}
		data["tools"] = jinja.NewList(tools)
	}
	data["documents"] = jinja.None()
	data["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	return data, nil
}

func messageValues(msgs []Message) (jinja.Value, error) {
	items := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		v, err := messageValue(m)
		if err != nil {
			return jinja.Value{}, &RenderError{Msg: fmt.Sprintf("messages[%d]: %v", i, err)}
		}
		items[i] = v
	}
	return jinja.NewList(items), nil
}

// messageValue is the dict a client would have sent, keys in OpenAI's order;
// absent optional fields are left out, so the template sees them undefined.
func messageValue(m Message) (jinja.Value, error) {
	v := jinja.NewDict()
	d := v.AsDict()
	d.Set("role", jinja.NewString(m.Role))
	d.Set("content", contentValue(m))
	if m.ReasoningContent != nil {
		d.Set("reasoning_content", jinja.NewString(*m.ReasoningContent))
	}
	if m.Name != "" {
		d.Set("name", jinja.NewString(m.Name))
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			c, err := toolCallValue(tc)
			if err != nil {
				return jinja.Value{}, fmt.Errorf("tool_calls[%d]: %v", i, err)
			}
			calls[i] = c
		}
		d.Set("tool_calls", jinja.NewList(calls))
	}
	if m.ToolCallID != "" {
		d.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	return v, nil
}

func contentValue(m Message) jinja.Value {
	switch {
	case m.Parts != nil:
		parts := make([]jinja.Value, len(m.Parts))
		for i, p := range m.Parts {
			pv := jinja.NewDict()
			pv.AsDict().Set("type", jinja.NewString(p.Type))
			pv.AsDict().Set("text", jinja.NewString(p.Text))
			parts[i] = pv
		}
		return jinja.NewList(parts)
	case m.ContentNull:
		return jinja.None()
	}
	return jinja.NewString(m.Content)
}

func toolCallValue(tc ToolCall) (jinja.Value, error) {
	fn := jinja.NewDict()
	fn.AsDict().Set("name", jinja.NewString(tc.Name))
	args, err := argumentsValue(tc.Arguments)
	if err != nil {
		return jinja.Value{}, err
	}
	fn.AsDict().Set("arguments", args)
	v := jinja.NewDict()
	if tc.ID != "" {
		v.AsDict().Set("id", jinja.NewString(tc.ID))
	}
	v.AsDict().Set("type", jinja.NewString("function"))
	v.AsDict().Set("function", fn)
	return v, nil
}

// argumentsValue passes an object as an ordered dict and anything else as a
// string (a JSON string as its text), as the Arguments doc says.
func argumentsValue(raw []byte) (jinja.Value, error) {
	if len(raw) == 0 {
		return jinja.NewDict(), nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return jinja.Value{}, fmt.Errorf("arguments: %v", err)
	}
	switch {
	case v.IsDict(), v.IsString():
		return v, nil
	}
	return jinja.NewString(string(trimJSONSpace(raw))), nil
}

// goValue converts an encoding/json value (or a json.RawMessage) to a
// template value.
func goValue(v any, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Value{}, errTooDeep
	}
	switch x := v.(type) {
	case jinja.Value:
		return x, nil
	case json.RawMessage:
		return decodeJSON(x)
	case json.Number:
		return numberValue(x), nil
	case nil, bool, string, int, int64:
		return jinja.FromGoValue(x), nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return jinja.NewInt(int64(x)), nil
		}
		return jinja.NewFloat(x), nil
	case []any:
		items := make([]jinja.Value, len(x))
		for i, item := range x {
			var err error
			if items[i], err = goValue(item, depth+1); err != nil {
				return jinja.Value{}, err
			}
		}
		return jinja.NewList(items), nil
	case map[string]any:
		d := jinja.NewDict()
		for _, k := range sortedKeys(x) {
			item, err := goValue(x[k], depth+1)
			if err != nil {
				return jinja.Value{}, err
			}
			d.AsDict().Set(k, item)
		}
		return d, nil
	}
	return jinja.Value{}, fmt.Errorf("unsupported value of type %T", v)
}

package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// The official Go SDK is the client in these tests.

func (h *harness) client(key string) *sdk.Client {
	c := adaptertest.AnthropicClient(h.http, key)
	return &c
}

var sdkWeatherTool = sdk.ToolUnionParam{OfTool: &sdk.ToolParam{
	Name:        "get_weather",
	Description: sdk.String("Current weather for a city."),
	InputSchema: sdk.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}},
}}

// weatherScript calls the tool, then answers once the result is in the
// prompt.
func weatherScript(prompt string) []string {
	if strings.Contains(prompt, "<tool_response>") {
		return []string{"The result is in.", "</think>\n\n", "It is ", "sunny."}
	}
	return append([]string{"Let me check.", "</think>\n\n"}, toolCall...)
}

func weatherParams(thinking bool) sdk.MessageNewParams {
	p := sdk.MessageNewParams{
		Model:     "fake-model",
		MaxTokens: 1024,
		Messages:  []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Weather in Paris?"))},
		Tools:     []sdk.ToolUnionParam{sdkWeatherTool},
	}
	if thinking {
		p.Thinking = sdk.ThinkingConfigParamOfEnabled(1024)
	}
	return p
}

func streamMessage(t *testing.T, c *sdk.Client, p sdk.MessageNewParams) *sdk.Message {
	t.Helper()
	s := c.Messages.NewStreaming(context.Background(), p)
	defer s.Close()
	var m sdk.Message
	for s.Next() {
		if err := m.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return &m
}

// blocks summarises a message's content for comparison.
func blocks(m *sdk.Message) []string {
	var out []string
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			out = append(out, "text:"+b.Text)
		case "thinking":
			out = append(out, "thinking:"+b.Thinking+":"+b.Signature)
		case "tool_use":
			var in map[string]any
			json.Unmarshal(b.Input, &in)
			out = append(out, "tool_use:"+b.Name+":"+in["city"].(string))
		default:
			out = append(out, b.Type)
		}
	}
	return out
}

// The tool loop, streamed and not: the model's call comes back as a
// tool_use block with a parsed input; the client sends the assistant turn
// and a tool_result back and gets the final answer.
func TestSDKToolLoop(t *testing.T) {
	eng := &servertest.Engine{Script: weatherScript}
	h := newHarness(t, eng, harnessOptions{thinking: true})
	c := h.client("k")
	ctx := context.Background()
	p := weatherParams(true)

	first, err := c.Messages.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if first.StopReason != "tool_use" || len(first.Content) != 2 || first.Content[1].Type != "tool_use" || !strings.HasPrefix(first.Content[1].ID, "toolu_") {
		t.Fatalf("%s", first.RawJSON())
	}
	streamed := streamMessage(t, c, p)
	if got, want := strings.Join(blocks(streamed), "|"), strings.Join(blocks(first), "|"); got != want || streamed.StopReason != first.StopReason {
		t.Fatalf("stream accumulates to\n%s (%s), non-stream\n%s (%s)", got, streamed.StopReason, want, first.StopReason)
	}
	if streamed.Usage.InputTokens != first.Usage.InputTokens || streamed.Usage.OutputTokens != first.Usage.OutputTokens {
		t.Fatalf("usage stream %+v non-stream %+v", streamed.Usage, first.Usage)
	}

	for _, stream := range []bool{false, true} {
		p2 := p
		p2.Messages = append(append([]sdk.MessageParam{}, p.Messages...), first.ToParam(),
			sdk.NewUserMessage(sdk.NewToolResultBlock(first.Content[1].ID, "sunny, 24 °C", false)))
		var final *sdk.Message
		if stream {
			final = streamMessage(t, c, p2)
		} else if final, err = c.Messages.New(ctx, p2); err != nil {
			t.Fatal(err)
		}
		last := final.Content[len(final.Content)-1]
		if final.StopReason != "end_turn" || last.Type != "text" || last.Text != "It is sunny." {
			t.Fatalf("stream=%v: final %v %s", stream, blocks(final), final.StopReason)
		}
		prompts := eng.Prompts()
		for _, want := range []string{"<function=get_weather>\n<parameter=city>\nParis\n</parameter>", "<tool_response>\nsunny, 24 °C\n</tool_response>"} {
			if !strings.Contains(prompts[len(prompts)-1], want) {
				t.Fatalf("rendered prompt lacks %q:\n%s", want, prompts[len(prompts)-1])
			}
		}
	}
}

// Thinking comes back signed; sent back unchanged it is rendered as the
// turn's reasoning (the real Qwen3.5 template keeps reasoning inside a tool
// loop), sent back with another signature it is not.
func TestSDKThinkingRoundTripWithSignature(t *testing.T) {
	eng := &servertest.Engine{Script: weatherScript}
	h := newHarness(t, eng, harnessOptions{renderer: loadQwen35(t)})
	c := h.client("k")
	p := weatherParams(true)
	first := streamMessage(t, c, p)
	th := first.Content[0]
	if th.Type != "thinking" || th.Thinking != "Let me check." || !strings.HasPrefix(th.Signature, signaturePrefix) {
		t.Fatalf("first block %s", th.RawJSON())
	}
	rendered := "<|im_start|>assistant\n<think>\nLet me check.\n</think>\n\n<tool_call>"
	cases := []struct {
		name      string
		signature string
		rendered  bool
	}{
		{"own signature", th.Signature, true},
		{"foreign signature", "EqQBCkYIBRgCKkBforeignsignature", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			back := first.ToParam()
			back.OfAssistant.Content[0] = sdk.NewThinkingBlock(tc.signature, th.Thinking)
			p2 := p
			p2.Messages = append(append([]sdk.MessageParam{}, p.Messages...), back,
				sdk.NewUserMessage(sdk.NewToolResultBlock(first.Content[1].ID, "sunny", false)))
			if _, err := c.Messages.New(context.Background(), p2); err != nil {
				t.Fatal(err)
			}
			prompts := eng.Prompts()
			if got := strings.Contains(prompts[len(prompts)-1], rendered); got != tc.rendered {
				t.Fatalf("reasoning rendered %v, want %v:\n%s", got, tc.rendered, prompts[len(prompts)-1])
			}
		})
	}
}

func TestSDKStopSequenceAndMaxTokens(t *testing.T) {
	h := newHarness(t, &servertest.Engine{Script: script("one ", "two ", "STOP", " three")}, harnessOptions{})
	c := h.client("k")
	p := sdk.MessageNewParams{Model: "fake-model", MaxTokens: 100, StopSequences: []string{"STOP"},
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("count"))}}
	for _, stream := range []bool{false, true} {
		var m *sdk.Message
		var err error
		if stream {
			m = streamMessage(t, c, p)
		} else if m, err = c.Messages.New(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		if m.StopReason != "stop_sequence" || m.StopSequence != "STOP" || m.Content[0].Text != "one two " {
			t.Fatalf("stream=%v: %s %q %v", stream, m.StopReason, m.StopSequence, blocks(m))
		}
	}
	p.StopSequences, p.MaxTokens = nil, 2
	m, err := c.Messages.New(context.Background(), p)
	if err != nil || m.StopReason != "max_tokens" || m.Content[0].Text != "one two " {
		t.Fatalf("%v %+v", err, m)
	}
}

func TestSDKCountTokensMatchesUsage(t *testing.T) {
	h := newHarness(t, &servertest.Engine{}, harnessOptions{})
	c := h.client("k")
	msgs := []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("How many tokens is this?"))}
	n, err := c.Messages.CountTokens(context.Background(), sdk.MessageCountTokensParams{Model: "fake-model", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Messages.New(context.Background(), sdk.MessageNewParams{Model: "fake-model", MaxTokens: 10, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	if n.InputTokens == 0 || n.InputTokens != m.Usage.InputTokens+m.Usage.CacheReadInputTokens {
		t.Fatalf("count %d, usage %+v", n.InputTokens, m.Usage)
	}
}

func sdkError(t *testing.T, err error) *sdk.Error {
	t.Helper()
	var e *sdk.Error
	if !errors.As(err, &e) {
		t.Fatalf("%v is not an API error", err)
	}
	return e
}

func TestSDKErrors(t *testing.T) {
	h := newHarness(t, &servertest.Engine{PrefillDelay: 300 * time.Millisecond}, harnessOptions{apiKey: "k", queueLimit: 1})
	ctx := context.Background()
	p := sdk.MessageNewParams{Model: "fake-model", MaxTokens: 10, Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("x"))}}

	_, err := h.client("wrong").Messages.New(ctx, p)
	if e := sdkError(t, err); e.StatusCode != 401 || e.Type() != "authentication_error" {
		t.Fatalf("%d %s", e.StatusCode, e.Type())
	}
	bad := p
	bad.Tools = []sdk.ToolUnionParam{sdkWeatherTool}
	bad.ToolChoice = sdk.ToolChoiceParamOfTool("no_such_tool")
	_, err = h.client("k").Messages.New(ctx, bad)
	if e := sdkError(t, err); e.StatusCode != 400 || e.Type() != "invalid_request_error" || !strings.Contains(e.Message, "no_such_tool") {
		t.Fatalf("%d %s %q", e.StatusCode, e.Type(), e.Message)
	}

	// A full queue: one runs, one waits, the third is overloaded.
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := h.client("k").Messages.New(ctx, p)
			done <- err
		}()
	}
	time.Sleep(100 * time.Millisecond)
	for _, stream := range []bool{false, true} {
		if stream {
			s := h.client("k").Messages.NewStreaming(ctx, p)
			for s.Next() {
			}
			err = s.Err()
			s.Close()
		} else {
			_, err = h.client("k").Messages.New(ctx, p)
		}
		if e := sdkError(t, err); e.StatusCode != 529 || e.Type() != "overloaded_error" {
			t.Fatalf("stream=%v: %d %s", stream, e.StatusCode, e.Type())
		}
	}
	if a, b := <-done, <-done; a != nil || b != nil {
		t.Fatalf("queued requests: %v %v", a, b)
	}
}

// The SDK surfaces an error event in the middle of a stream as an error.
func TestSDKErrorEventMidStream(t *testing.T) {
	h := newHarness(t, failingEngine{&servertest.Engine{}}, harnessOptions{})
	s := h.client("k").Messages.NewStreaming(context.Background(), sdk.MessageNewParams{Model: "fake-model", MaxTokens: 10,
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("x"))}})
	defer s.Close()
	for s.Next() {
	}
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "the disk went away") {
		t.Fatalf("stream error %v", err)
	}
}

var _ server.Engine = failingEngine{}

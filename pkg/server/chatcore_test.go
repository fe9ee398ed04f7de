package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

func newCore(t *testing.T, eng *servertest.Engine) *server.Server {
	t.Helper()
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(eng, servertest.Renderer{})
	return s
}

// runChat prepares req on s and runs it to its end, failing the test on
// an error from either.
func runChat(t *testing.T, s *server.Server, req *server.ChatRequest) *server.ChatResult {
	t.Helper()
	job, err := s.PrepareChat(req)
	if err != nil {
		t.Fatal(err)
	}
	res, err := job.RunChat(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func userTurn(text string) []chattemplate.Message {
	return []chattemplate.Message{{Role: "user", Content: text}}
}

// The core says which stop string ended generation (Anthropic's
// stop_sequence), and none when the model ended on its own.
func TestChatResultNamesTheStopString(t *testing.T) {
	eng := &servertest.Engine{Script: func(string) []string { return []string{"one ", "two ", "END", " three"} }}
	s := newCore(t, eng)
	cases := []struct {
		name  string
		stops []string
		want  string
		text  string
	}{
		{"hit", []string{"never", "END"}, "END", "one two "},
		{"earliest wins", []string{"END", "two"}, "two", "one "},
		{"no stop", nil, "", "one two END three"},
		{"stop not in output", []string{"zzz"}, "", "one two END three"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := runChat(t, s, &server.ChatRequest{Messages: userTurn("x"), Stop: c.stops, Kwargs: map[string]any{"enable_thinking": false}})
			if res.StopSequence != c.want || res.Content != c.text {
				t.Fatalf("stop %q content %q, want %q %q", res.StopSequence, res.Content, c.want, c.text)
			}
		})
	}
}

// Every protocol's log line gives the time to the first token from the
// request's arrival, the wait before the generation included.
func TestFinishedLogCountsTheWaitInTheTTFT(t *testing.T) {
	s := newCore(t, &servertest.Engine{TokenDelay: 5 * time.Millisecond})
	start := time.Now()
	job, err := s.PrepareChat(&server.ChatRequest{Messages: userTurn("x"), Kwargs: map[string]any{"enable_thinking": false}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // as if queued
	res, err := job.RunChat(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var log server.RequestLog
	log.Finished(job, res.Usage, res.Outcome, res.Finish)
	ttft := time.Duration(log.TTFTSeconds * float64(time.Second))
	if log.Model != "fake-model" || log.CompletionTokens != res.Usage.CompletionTokens || log.Finish != res.Finish ||
		ttft < 50*time.Millisecond || ttft > time.Since(start) {
		t.Fatalf("log %+v (ttft %v, %v since the request)", log, ttft, time.Since(start))
	}
}

// count_tokens counts what PrepareChat would admit, the forced call
// prefix included, without taking a place in the queue.
func TestCountChatTokensMatchesThePreparedPrompt(t *testing.T) {
	s := newCore(t, &servertest.Engine{})
	tool := json.RawMessage(`{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}`)
	for _, req := range []*server.ChatRequest{
		{Messages: userTurn("hello")},
		{Messages: userTurn("hello"), Tools: []json.RawMessage{tool}, ToolChoice: server.ToolRequired},
		{Messages: userTurn("hello"), Tools: []json.RawMessage{tool}, ToolChoice: server.ToolNamed, ToolName: "f"},
	} {
		n, err := s.CountChatTokens(req)
		if err != nil {
			t.Fatal(err)
		}
		job, err := s.PrepareChat(req)
		if err != nil {
			t.Fatal(err)
		}
		job.Cancel()
		if n != job.PromptTokens() || n == 0 {
			t.Fatalf("count %d, prepared %d", n, job.PromptTokens())
		}
	}
	_, err := s.CountChatTokens(&server.ChatRequest{Messages: userTurn("x"), ToolChoice: server.ToolRequired})
	var se *server.Error
	if !errors.As(err, &se) || se.Kind != server.KindInvalid {
		t.Fatalf("tool_choice required without tools: %v", err)
	}
}

// A max_tokens larger than what the context leaves is lowered to fit and
// the reply ends with finish reason length at the context (issue #39 item 5:
// an agent asking for 32,000 tokens on a small context still starts), and
// the log record names both figures; --strict-max-tokens restores the 400,
// except where the protocol always lowers it (ClampMaxTokens: Anthropic,
// chat). A prompt that alone does not fit is refused either way.
func TestMaxTokensLoweredToTheContext(t *testing.T) {
	long := func(string) []string { return slices.Repeat([]string{"a "}, 400) }
	for _, tc := range []struct {
		name          string
		strict, clamp bool
		prompt        string
		want          string // "" (served and lowered) or the refusal's Param
	}{
		{"default lowers it", false, false, "x", ""},
		{"strict refuses", true, false, "x", "max_tokens"},
		{"strict, protocol that lowers it", true, true, "x", ""},
		{"prompt alone too long", false, false, strings.Repeat("long ", 60), "messages"},
		{"prompt alone too long, strict", true, true, strings.Repeat("long ", 60), "messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := server.New(server.Config{Log: func(server.RequestLog) {}, StrictMaxTokens: tc.strict})
			s.SetEngine(&servertest.Engine{Context: 200, Script: long}, servertest.Renderer{})
			job, err := s.PrepareChat(&server.ChatRequest{Messages: userTurn(tc.prompt), MaxTokens: 32000, ClampMaxTokens: tc.clamp})
			if tc.want != "" {
				var se *server.Error
				if !errors.As(err, &se) || se.Kind != server.KindContextOverflow || se.Param != tc.want {
					t.Fatalf("%v, want a context overflow naming %s", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			res, err := job.RunChat(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Finish != "length" {
				t.Fatalf("finish %q, want length at the context", res.Finish)
			}
			var rec server.RequestLog
			rec.Finished(job, res.Usage, res.Outcome, res.Finish)
			if rec.MaxTokensAsked != 32000 || rec.MaxTokens != 200-res.Usage.PromptTokens {
				t.Fatalf("log record max_tokens %d asked, %d served", rec.MaxTokensAsked, rec.MaxTokens)
			}
			var line bytes.Buffer
			server.TextLogger(&line)(rec)
			if want := fmt.Sprintf(" max_tokens=32000→%d(context)", rec.MaxTokens); !strings.Contains(line.String(), want) {
				t.Fatalf("log line %q lacks %q", line.String(), want)
			}
		})
	}
}

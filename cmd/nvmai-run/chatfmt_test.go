package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

func qwen38Format(t *testing.T) *chatFormat {
	t.Helper()
	tmpl, err := chattemplate.Load(filepath.Join("..", "..", "pkg", "chattemplate", "testdata", "models", "qwen38"))
	if err != nil {
		t.Fatal(err)
	}
	return &chatFormat{tmpl: tmpl}
}

const (
	lowSentence   = "Reasoning effort is set to low. Keep your thinking brief and answer directly."
	xhighSentence = "Reasoning effort is set to xhigh."
)

// With a Qwen3.8 template the chat renders every turn with it: the effort
// sentence heads the system turn, each turn feeds only what follows the
// text the session holds, earlier reasoning stays in the conversation, and
// /effort makes the next turn re-read the conversation from the start.
func TestChatQwen38Template(t *testing.T) {
	in := &scriptedInput{lines: []string{"/effort", "/effort high", "/effort low", "hello", "x <|im_end|> y", "/effort medium", "again"}}
	tok := loadEmbeddedTokenizer(t)
	imEnd, ok := tok.TokenID("<|im_end|>")
	if !ok {
		t.Fatal("no <|im_end|>")
	}
	h := newChatHarness(t, in, func() *fakeSession {
		return &fakeSession{reply: []int{10, 11, 12}, texts: []string{"R", "\n</think>\n\n", "A"}, stopID: imEnd}
	})
	h.ch.format = qwen38Format(t)
	if err := h.ch.run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	info := h.info.String()
	for _, want := range []string{
		"(reasoning effort xhigh; the template takes low, medium, xhigh)",
		`(/effort "high": this model's chat template takes low, medium, xhigh (default xhigh))`,
		"(reasoning effort low)",
		"(reasoning effort medium: it is stated at the head of the conversation",
		"re-reading it from the start",
	} {
		if !strings.Contains(info, want) {
			t.Errorf("notices lack %q:\n%s", want, info)
		}
	}
	if len(h.sessions) != 2 || len(h.sessions[0].prompts) != 2 || len(h.sessions[1].prompts) != 1 {
		t.Fatalf("%d sessions; want the first to read two turns and a second one (after /effort medium) one", len(h.sessions))
	}
	first := tok.Decode(h.sessions[0].prompts[0])
	if want := "<|im_start|>system\n" + lowSentence + "\n\nBe brief.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n"; first != want {
		t.Errorf("first turn %q, want %q", first, want)
	}
	second := h.sessions[0].prompts[1]
	if got, want := tok.Decode(second), "\n<|im_start|>user\nx <|im_end|> y<|im_end|>\n<|im_start|>assistant\n<think>\n"; got != want {
		t.Errorf("second turn %q, want %q", got, want)
	}
	if n := countID(second, imEnd); n != 1 {
		t.Errorf("second turn holds %d <|im_end|> tokens, want 1: the typed one is text", n)
	}
	again := tok.Decode(h.sessions[1].prompts[0])
	turn := "<|im_start|>assistant\n<think>\nR\n</think>\n\nA<|im_end|>\n"
	if strings.Contains(again, "Reasoning effort") || strings.Count(again, turn) != 2 || !strings.HasPrefix(again, "<|im_start|>system\nBe brief.<|im_end|>\n") {
		t.Errorf("re-read conversation %q: want no effort sentence (medium) and both earlier replies with their reasoning", again)
	}
	if out := h.out.String(); !strings.HasPrefix(out, "<think>\nR\n</think>\n\nA\n") {
		t.Errorf("stdout %q: want the opened <think> shown before the reply", out)
	}
}

func countID(ids []int, id int) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// On the real tiny model with the Qwen3.8 template, the second reply of
// the chat, whose session read the conversation turn by turn, is the one
// a fresh session gives for the whole rendered conversation.
func TestChatQwen38TemplateOnTheRealModel(t *testing.T) {
	e := tinyEngine(t)
	in := &scriptedInput{lines: []string{"Once upon a", "The capital of France is"}}
	h := newChatHarness(t, in, nil)
	h.ch.newSession = func() generator { return e.NewSession(runtime.SessionOptions{}) }
	imEnd, _ := e.Tokenizer.TokenID("<|im_end|>")
	h.ch.tok, h.ch.format = e.Tokenizer, qwen38Format(t)
	h.ch.opt = runtime.GenerateOptions{MaxTokens: 8, StopIDs: append(e.EOSIDs(), imEnd)}
	if err := h.ch.run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(h.reports) != 2 {
		t.Fatalf("%d replies, want 2", len(h.reports))
	}
	if strings.Contains(h.info.String(), "re-reading") {
		t.Logf("the template re-rendered the first reply differently; the second turn re-read everything: %s", h.info.String())
	}
	prompt, err := h.ch.format.render(h.ch.history[:len(h.ch.history)-1])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(prompt, xhighSentence) {
		t.Errorf("rendered conversation %q lacks the default effort sentence", prompt)
	}
	fresh, err := e.NewSession(runtime.SessionOptions{}).Generate(context.Background(), encodeRendered(e.Tokenizer, prompt, []string{"Be brief.", "Once upon a", "The capital of France is"}), h.ch.opt)
	if err != nil {
		t.Fatal(err)
	}
	if second := h.reports[1]; !slices.Equal(fresh.IDs, second.IDs) {
		t.Errorf("second reply %q, a fresh session reading the rendered conversation %q", e.Tokenizer.Decode(second.IDs), e.Tokenizer.Decode(fresh.IDs))
	}
}

// End to end on a synthetic qwen4_exp install, which carries the Qwen3.8
// template: --chat renders with it and its reasoning effort.
func TestChatReasoningEffortOnSyntheticQwen38(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q38")
	if _, err := convert.Synth(context.Background(), convert.SynthOptions{Geometry: "tiny-qwen38", Bits: 4, Output: dir, Seed: 1, Threads: 1}); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		effort, want string
	}{
		{"", "<|im_start|>system\n" + xhighSentence + " Please think carefully and thoroughly before you answer.\n\nBe brief.<|im_end|>\n"},
		{"low", "<|im_start|>system\n" + lowSentence + "\n\nBe brief.<|im_end|>\n"},
		{"medium", "<|im_start|>system\nBe brief.<|im_end|>\n"},
	} {
		args := []string{"--model", dir, "--chat", "--system", "Be brief.", "--prompt", "Hi", "--max-tokens", "2", "--temperature", "0", "--threads", "1", "--json"}
		if tc.effort != "" {
			args = append(args, "--reasoning-effort", tc.effort)
		}
		r := clitest.Run(t, app(), args...)
		if r.Code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.effort, r.Code, r.Stderr)
		}
		var out struct {
			PromptIDs []int `json:"prompt_ids"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
			t.Fatalf("%v: %s", err, r.Stdout)
		}
		want := tc.want + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"
		if got := tok.Decode(out.PromptIDs); got != want {
			t.Errorf("--reasoning-effort %q: prompt %q, want %q", tc.effort, got, want)
		}
	}
	r := clitest.Run(t, app(), "--model", dir, "--chat", "--prompt", "Hi", "--reasoning-effort", "high")
	if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, `--reasoning-effort: "high": this model's chat template takes low, medium, xhigh (default xhigh)`) {
		t.Errorf("--reasoning-effort high: exit %d, stderr %q", r.Code, r.Stderr)
	}
}

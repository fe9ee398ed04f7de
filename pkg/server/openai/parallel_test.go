package openai

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
)

// Four streaming chat requests sent at once to a server with --parallel 4
// get the texts, finish reasons and usage that the same requests get one
// after another from a server running one at a time; no goroutine is
// left once the server closes.
func TestTinyModelParallelStreamsEqualSequential(t *testing.T) {
	e := adaptertest.TinyEngine(t)
	base := runtime.NumGoroutine()
	serve := func(parallel int) (oai.Client, func()) {
		s, re := adaptertest.TinyServer(e, server.RuntimeOptions{ModelID: "tiny", CacheBytes: 64 << 20, PrefillChunk: 16, Parallel: parallel})
		if re.Parallel() != parallel {
			t.Fatalf("Parallel %d, asked %d", re.Parallel(), parallel)
		}
		hs := httptest.NewServer(host(s))
		return adaptertest.OpenAIClient(hs, "k"), func() { hs.Close(); re.Close() }
	}
	reqs := []oai.ChatCompletionNewParams{
		greedy(oai.SystemMessage("Be brief."), oai.UserMessage("The capital of France is")),
		{Model: "tiny", Messages: []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("Be brief."), oai.UserMessage("Name three colours.")},
			Temperature: oai.Float(0.8), Seed: oai.Int(42), MaxTokens: oai.Int(20)},
		{Model: "tiny", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Write a haiku about the sea.")},
			Temperature: oai.Float(0), MaxTokens: oai.Int(30)},
		{Model: "tiny", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Tell me a story about a lighthouse.")},
			Temperature: oai.Float(1), Seed: oai.Int(7), MaxTokens: oai.Int(120)},
	}
	for i := range reqs {
		reqs[i].StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
	}
	stream := func(c oai.Client, p oai.ChatCompletionNewParams) (string, error) {
		s := c.Chat.Completions.NewStreaming(context.Background(), p)
		var acc oai.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			return "", err
		}
		ch := acc.Choices[0]
		return fmt.Sprintf("%q finish=%s completion=%d", ch.Message.Content, ch.FinishReason, acc.Usage.CompletionTokens), nil
	}
	one, closeOne := serve(1)
	want := make([]string, len(reqs))
	for i, p := range reqs {
		var err error
		if want[i], err = stream(one, p); err != nil {
			t.Fatal(err)
		}
	}
	closeOne()
	par, closePar := serve(4)
	got := make([]string, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, p := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], errs[i] = stream(par, p)
		}()
	}
	close(start)
	wg.Wait()
	closePar()
	for i := range reqs {
		if errs[i] != nil || got[i] != want[i] {
			t.Errorf("request %d at once: %s (%v); one after another: %s", i, got[i], errs[i], want[i])
		}
	}
	adaptertest.WaitGoroutines(t, base, 3*time.Second)
}

// On a --parallel 2 server, a streaming client that goes away mid-answer
// frees its slot at once and leaves no goroutine, while another stream
// beside it gets the answer it gets alone.
func TestTinyModelParallelDisconnectFreesItsSlot(t *testing.T) {
	e := adaptertest.TinyEngine(t)
	p := oai.ChatCompletionNewParams{Model: "tiny", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Tell me a long story about the sea.")},
		Temperature: oai.Float(1), Seed: oai.Int(9), MaxTokens: oai.Int(400)}
	s1, re1 := adaptertest.TinyServer(e, server.RuntimeOptions{ModelID: "tiny", PrefillChunk: 16})
	hs1 := httptest.NewServer(host(s1))
	c1 := adaptertest.OpenAIClient(hs1, "k")
	alone, err := c1.Chat.Completions.New(context.Background(), p)
	hs1.Close()
	re1.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, re := adaptertest.TinyServer(e, server.RuntimeOptions{ModelID: "tiny", PrefillChunk: 16, Parallel: 2})
	hs := httptest.NewServer(host(s))
	defer func() { hs.Close(); re.Close() }()
	c := adaptertest.OpenAIClient(hs, "k")
	hs.Client().Get(hs.URL + "/health") // warm the connection pool
	base := runtime.NumGoroutine()
	waitFor := func(what string, ok func() bool) {
		for start := time.Now(); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Since(start) > 3*time.Second {
				t.Fatalf("%s: still %+v after 3 s", what, s.Activity())
			}
		}
	}
	// The leaving client starts first, with an answer far longer than the
	// other's, so that both run when it leaves.
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan struct{})
	go func() {
		defer close(left)
		body := `{"model":"tiny","stream":true,"max_tokens":4000,"temperature":1,"seed":3,"messages":[{"role":"user","content":"Count to one thousand."}]}`
		req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := hs.Client().Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitFor("the leaving stream started", func() bool { return s.Activity().Generating == 1 })
	other := make(chan string, 1)
	go func() {
		r, err := c.Chat.Completions.New(context.Background(), p)
		if err != nil {
			other <- err.Error()
			return
		}
		other <- r.Choices[0].Message.Content
	}()
	waitFor("both generating", func() bool { return s.Activity().Generating == 2 })
	cancel()
	<-left
	waitFor("the slot freed", func() bool { return s.Activity().Generating <= 1 })
	if got := <-other; got != alone.Choices[0].Message.Content {
		t.Fatalf("the other stream %q, alone %q", got, alone.Choices[0].Message.Content)
	}
	hs.CloseClientConnections()
	hs.Client().CloseIdleConnections()
	adaptertest.WaitGoroutines(t, base, 3*time.Second)
}

package openai

import (
	"context"
	"fmt"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
)

// Three streaming chat requests sent at once to a server with --parallel 3
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
	par, closePar := serve(3)
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

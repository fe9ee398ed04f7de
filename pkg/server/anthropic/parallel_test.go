package anthropic

import (
	"context"
	"fmt"
	"net/http/httptest"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
)

// Four streaming Messages requests through the Anthropic SDK, interleaved
// on a --parallel 4 server (each sent once the one before has streamed
// its first text, so each joins while the others decode), get the texts,
// stop reasons and usage that the same requests get one after another
// from a server running one at a time; no goroutine is left after.
func TestTinyModelParallelStreamsEqualSequential(t *testing.T) {
	e := adaptertest.TinyEngine(t)
	base := goruntime.NumGoroutine()
	// Anthropic has no seed field: serve --seed's default seeds the
	// sampled requests, so both servers draw the same tokens.
	seed := uint64(42)
	serve := func(parallel int) (sdk.Client, *server.Server, func()) {
		re := server.NewRuntimeEngine(e, server.RuntimeOptions{ModelID: "tiny", CacheBytes: 64 << 20, PrefillChunk: 16, Parallel: parallel})
		if re.Parallel() != parallel {
			t.Fatalf("Parallel %d, asked %d", re.Parallel(), parallel)
		}
		s := server.New(server.Config{Log: func(server.RequestLog) {}, Defaults: server.Defaults{Seed: &seed}})
		s.SetEngine(re, server.PlainChatML{})
		h := httpapi.New(s, httpapi.Options{})
		New(s, Options{}).Mount(h)
		hs := httptest.NewServer(h)
		return adaptertest.AnthropicClient(hs, "k"), s, func() { hs.Close(); re.Close() }
	}
	type request struct {
		p    sdk.MessageNewParams
		opts []option.RequestOption // this SDK version has no temperature field: set on the wire
	}
	user := func(text string) []sdk.MessageParam {
		return []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock(text))}
	}
	reqs := []request{
		{sdk.MessageNewParams{Model: "tiny", MaxTokens: 24, System: []sdk.TextBlockParam{{Text: "Be brief."}}, Messages: user("The capital of France is")},
			[]option.RequestOption{option.WithJSONSet("temperature", 0)}},
		{sdk.MessageNewParams{Model: "tiny", MaxTokens: 120, Messages: user("Tell me a story about the sea.")},
			[]option.RequestOption{option.WithJSONSet("temperature", 1)}},
		{sdk.MessageNewParams{Model: "tiny", MaxTokens: 40, System: []sdk.TextBlockParam{{Text: "Be brief."}}, Messages: user("Name three colours.")},
			[]option.RequestOption{option.WithJSONSet("temperature", 0.8), option.WithJSONSet("top_k", 20)}},
		{sdk.MessageNewParams{Model: "tiny", MaxTokens: 80, Messages: user("Write a haiku about mountains.")},
			[]option.RequestOption{option.WithJSONSet("temperature", 0)}},
	}
	// stream sends r and returns its summary; first (if not nil) is closed
	// at its first text delta.
	stream := func(c sdk.Client, r request, first chan<- struct{}) (string, error) {
		s := c.Messages.NewStreaming(context.Background(), r.p, r.opts...)
		defer s.Close()
		var m sdk.Message
		for s.Next() {
			ev := s.Current()
			if err := m.Accumulate(ev); err != nil {
				return "", err
			}
			if first != nil && ev.Type == "content_block_delta" {
				close(first)
				first = nil
			}
		}
		if first != nil {
			close(first)
		}
		if err := s.Err(); err != nil {
			return "", err
		}
		return fmt.Sprintf("%q stop=%s input=%d output=%d", blocks(&m), m.StopReason, m.Usage.InputTokens+m.Usage.CacheReadInputTokens, m.Usage.OutputTokens), nil
	}

	one, _, closeOne := serve(1)
	want := make([]string, len(reqs))
	for i, r := range reqs {
		var err error
		if want[i], err = stream(one, r, nil); err != nil {
			t.Fatal(err)
		}
	}
	closeOne()

	par, s, closePar := serve(4)
	var most atomic.Int32 // the most generations seen at once
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if g := int32(s.Activity().Generating); g > most.Load() {
				most.Store(g)
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	got := make([]string, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		first := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = stream(par, r, first)
		}()
		<-first
	}
	wg.Wait()
	close(stopWatch)
	<-watched
	closePar()
	for i := range reqs {
		if errs[i] != nil || got[i] != want[i] {
			t.Errorf("request %d interleaved: %s (%v); one after another: %s", i, got[i], errs[i], want[i])
		}
	}
	if most.Load() < 2 {
		t.Errorf("at most %d generations ran at once: the requests did not interleave", most.Load())
	}
	adaptertest.WaitGoroutines(t, base, 3*time.Second)
}

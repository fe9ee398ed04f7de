package openai

import (
	"context"
	"net/http/httptest"
	"testing"

	oai "github.com/openai/openai-go/v3"

	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
)

func TestMain(m *testing.M) { fixinstall.Main(m) }

type tinyServer struct {
	eng    *server.RuntimeEngine
	client oai.Client
}

func newTinyServer(t *testing.T, cacheBytes int64) *tinyServer {
	t.Helper()
	s, re := adaptertest.TinyServer(adaptertest.TinyEngine(t), server.RuntimeOptions{ModelID: "tiny", CacheBytes: cacheBytes, PrefillChunk: 16})
	hs := httptest.NewServer(host(s))
	t.Cleanup(hs.Close)
	return &tinyServer{eng: re, client: adaptertest.OpenAIClient(hs, "k")}
}

func (ts *tinyServer) chat(t *testing.T, p oai.ChatCompletionNewParams) *oai.ChatCompletion {
	t.Helper()
	r, err := ts.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func greedy(msgs ...oai.ChatCompletionMessageParamUnion) oai.ChatCompletionNewParams {
	return oai.ChatCompletionNewParams{Model: "tiny", Messages: msgs, Temperature: oai.Float(0), MaxTokens: oai.Int(24)}
}

func TestTinyModelStreamEqualsNonStream(t *testing.T) {
	ts := newTinyServer(t, 64<<20)
	p := greedy(oai.SystemMessage("Be brief."), oai.UserMessage("The capital of France is"))
	want := ts.chat(t, p)
	s := ts.client.Chat.Completions.NewStreaming(context.Background(), p)
	var acc oai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0]; got.Message.Content != want.Choices[0].Message.Content || got.FinishReason != want.Choices[0].FinishReason {
		t.Fatalf("stream %q/%s, non-stream %q/%s", got.Message.Content, got.FinishReason, want.Choices[0].Message.Content, want.Choices[0].FinishReason)
	}
	if want.Choices[0].Message.Content == "" {
		t.Fatal("empty reply")
	}
}

// A second turn resumes from the first turn's snapshot: it reports cached
// tokens and its greedy reply is identical to that of a server that
// prefills the whole conversation cold.
func TestTinyModelPromptReuseIsBitIdenticalToCold(t *testing.T) {
	warm := newTinyServer(t, 64<<20)
	cold := newTinyServer(t, 0)
	first := []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("You are a helpful assistant."), oai.UserMessage("Tell me about Paris.")}
	r1 := warm.chat(t, greedy(first...))
	if r1.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("first turn reports %d cached tokens", r1.Usage.PromptTokensDetails.CachedTokens)
	}
	second := append(first, oai.AssistantMessage(r1.Choices[0].Message.Content), oai.UserMessage("And Berlin?"))
	// A side request between the turns must not evict the conversation.
	warm.chat(t, greedy(oai.UserMessage("Write a title for this chat.")))
	r2 := warm.chat(t, greedy(second...))
	c2 := cold.chat(t, greedy(second...))
	// At least the first turn's prompt but its last token is reused (more
	// when the reply re-tokenizes to the ids that were sampled).
	if got := r2.Usage.PromptTokensDetails.CachedTokens; got < r1.Usage.PromptTokens-1 {
		t.Fatalf("second turn reused %d tokens; the first turn's prompt alone has %d", got, r1.Usage.PromptTokens)
	}
	t.Logf("second turn: %d of %d prompt tokens reused", r2.Usage.PromptTokensDetails.CachedTokens, r2.Usage.PromptTokens)
	if c2.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatal("the cold server reported cached tokens")
	}
	if r2.Choices[0].Message.Content != c2.Choices[0].Message.Content {
		t.Fatalf("warm %q, cold %q", r2.Choices[0].Message.Content, c2.Choices[0].Message.Content)
	}
	// The same request again continues from the end-of-prompt snapshot.
	r3 := warm.chat(t, greedy(second...))
	if r3.Choices[0].Message.Content != c2.Choices[0].Message.Content || r3.Usage.PromptTokensDetails.CachedTokens != r3.Usage.PromptTokens-1 {
		t.Fatalf("repeat: %q cached %d of %d", r3.Choices[0].Message.Content, r3.Usage.PromptTokensDetails.CachedTokens, r3.Usage.PromptTokens)
	}
	if st := warm.eng.CacheStats(); st.Bytes > st.Budget || st.Entries == 0 {
		t.Fatalf("cache %+v", st)
	}
}

func TestTinyModelSameSeedSameText(t *testing.T) {
	ts := newTinyServer(t, 64<<20)
	p := oai.ChatCompletionNewParams{Model: "tiny", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Once upon a time")},
		Temperature: oai.Float(1), TopP: oai.Float(0.95), Seed: oai.Int(42), MaxTokens: oai.Int(24), PresencePenalty: oai.Float(0.5)}
	a, b := ts.chat(t, p), ts.chat(t, p)
	if a.Choices[0].Message.Content != b.Choices[0].Message.Content {
		t.Fatalf("seed 42 gave %q then %q", a.Choices[0].Message.Content, b.Choices[0].Message.Content)
	}
	p.Seed = oai.Int(43)
	p.MaxTokens = oai.Int(48)
	if c := ts.chat(t, p); c.Choices[0].Message.Content == a.Choices[0].Message.Content {
		t.Log("seeds 42 and 43 gave the same text (possible on a tiny model)")
	}
}

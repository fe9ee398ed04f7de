package anthropic

import (
	"context"
	"net/http/httptest"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
)

func TestMain(m *testing.M) { fixinstall.Main(m) }

// Through the real engine and tokenizer: the stream accumulates to the
// non-streamed greedy reply, count_tokens equals the prompt the engine
// ran, and a repeated request reports the prompt cache's share as
// cache_read_input_tokens.
func TestTinyModelThroughTheRealEngine(t *testing.T) {
	s, _ := adaptertest.TinyServer(adaptertest.TinyEngine(t), server.RuntimeOptions{ModelID: "tiny", CacheBytes: 64 << 20, PrefillChunk: 16})
	h := httpapi.New(s, httpapi.Options{})
	New(s, Options{}).Mount(h)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	// This SDK version has no temperature field: greedy is set on the wire.
	c := adaptertest.AnthropicClient(hs, "k", option.WithJSONSet("temperature", 0))
	ctx := context.Background()
	msgs := []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("The capital of France is"))}
	p := sdk.MessageNewParams{Model: "tiny", MaxTokens: 24, System: []sdk.TextBlockParam{{Text: "Be brief."}}, Messages: msgs}

	first, err := c.Messages.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Content) == 0 || first.Content[len(first.Content)-1].Text == "" || first.Model != "tiny" {
		t.Fatalf("%s", first.RawJSON())
	}
	n, err := c.Messages.CountTokens(ctx, sdk.MessageCountTokensParams{Model: "tiny", Messages: msgs,
		System: sdk.MessageCountTokensParamsSystemUnion{OfTextBlockArray: []sdk.TextBlockParam{{Text: "Be brief."}}}})
	if err != nil {
		t.Fatal(err)
	}
	if total := first.Usage.InputTokens + first.Usage.CacheReadInputTokens; total != n.InputTokens {
		t.Fatalf("usage %+v, count_tokens %d", first.Usage, n.InputTokens)
	}
	streamed := streamMessage(t, &c, p)
	if got, want := blocks(streamed), blocks(first); len(got) != len(want) || got[len(got)-1] != want[len(want)-1] || streamed.StopReason != first.StopReason {
		t.Fatalf("stream %v (%s), non-stream %v (%s)", got, streamed.StopReason, want, first.StopReason)
	}
	if streamed.Usage.CacheReadInputTokens == 0 || streamed.Usage.InputTokens+streamed.Usage.CacheReadInputTokens != n.InputTokens {
		t.Fatalf("the repeated request's usage %+v (prompt %d tokens)", streamed.Usage, n.InputTokens)
	}
}

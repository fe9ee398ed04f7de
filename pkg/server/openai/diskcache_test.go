package openai

import (
	"context"
	"net/http/httptest"
	"testing"

	oai "github.com/openai/openai-go/v3"

	"github.com/nvmai/nvmai/pkg/promptcache"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
)

// diskServer is a server as `nvmai-run serve --prompt-cache-dir dir`
// starts it: a new engine and a new disk cache over dir.
func diskServer(t *testing.T, dir string) (oai.Client, *promptcache.Disk) {
	t.Helper()
	e := adaptertest.TinyEngine(t)
	d, err := promptcache.OpenDisk(promptcache.DiskOptions{Dir: dir, Budget: 1 << 30, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	s, _ := adaptertest.TinyServer(e, server.RuntimeOptions{ModelID: "tiny", CacheBytes: 64 << 20, PrefillChunk: 16,
		Disk: d, TemplateSHA256: server.PlainChatMLSHA256(), DiskMinTokens: 16})
	hs := httptest.NewServer(host(s))
	t.Cleanup(hs.Close)
	return adaptertest.OpenAIClient(hs, "k"), d
}

// After a restart, a request sharing the system prefix reports the disk
// hit as usage.prompt_tokens_details.cached_tokens, like a RAM hit, and
// answers what the first server answers.
func TestDiskCacheHitReportedAsCachedTokens(t *testing.T) {
	dir := t.TempDir()
	params := func(user string) oai.ChatCompletionNewParams {
		return oai.ChatCompletionNewParams{
			Model:       "tiny",
			Messages:    []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("You are a coding agent with tools to read, write and run files in a repository."), oai.UserMessage(user)},
			MaxTokens:   oai.Int(6),
			Temperature: oai.Float(0),
		}
	}
	first, d1 := diskServer(t, dir)
	r1, err := first.Chat.Completions.New(context.Background(), params("Say hi."))
	if err != nil {
		t.Fatal(err)
	}
	want, err := first.Chat.Completions.New(context.Background(), params("List files."))
	if err != nil {
		t.Fatal(err)
	}
	d1.Close()
	if r1.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("the first request reported %d cached tokens", r1.Usage.PromptTokensDetails.CachedTokens)
	}
	second, _ := diskServer(t, dir)
	got, err := second.Chat.Completions.New(context.Background(), params("List files."))
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Usage.PromptTokensDetails.CachedTokens; c < 16 || c >= got.Usage.PromptTokens {
		t.Errorf("after a restart: %d of %d prompt tokens cached", c, got.Usage.PromptTokens)
	}
	if got.Choices[0].Message.Content != want.Choices[0].Message.Content {
		t.Errorf("after a restart: %q, before %q", got.Choices[0].Message.Content, want.Choices[0].Message.Content)
	}
}

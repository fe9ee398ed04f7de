package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/corpus"
	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/anthropic"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/openai"
	"github.com/nvmai/nvmai/pkg/server/responses"
)

// loadCorpus is the corpus's schemas (internal/testfix/corpus) by name, as
// in pkg/jsonconstrain's corpus.golden: the file's stem for its "schema",
// stem#tool for a tool's inputSchema, stem#tool/output for its
// outputSchema.
func loadCorpus(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	out := map[string]json.RawMessage{}
	for _, c := range corpus.Schemas(t) {
		out[c.Name] = c.Schema
	}
	return out
}

// corpusSubset are the corpus schemas the quick run sends through the
// server, one of each shape: a flat SDK schema, an SDK response with an
// array of objects, enums and anyOf under $defs, bounded integers beside
// a draft-07 $ref to a property, a nested MCP tool with an optional
// array. Each closes every object (additionalProperties false), so the
// tiny model's document mostly ends within max_tokens. (Recursive schemas
// are covered by pkg/jsonconstrain's TestCorpusRandomGenerationValidates:
// the tiny model's deep trees take too long for the quick run.)
var corpusSubset = []string{
	"anthropic-go-structured-outputs-raw",
	"openai-node-math-response",
	"openai-python-query-tool#Query",
	"mcp-server-sequential-thinking#sequentialthinking",
	"mcp-server-filesystem#edit_file",
}

// independentValidator is the corpus judge (corpus.NewValidator) of schema.
func independentValidator(t *testing.T, schema json.RawMessage) *corpus.Validator {
	t.Helper()
	cv, err := corpus.NewValidator(schema)
	if err != nil {
		t.Fatalf("the independent validator cannot compile the schema: %v", err)
	}
	return cv
}

// corpusProtocol sends a schema as one protocol's structured-output field
// and reads the reply's text and whether it ended on an end token.
type corpusProtocol struct {
	name, path string
	body       func(schema, limits json.RawMessage, maxTokens int) string
	reply      func(t *testing.T, resp []byte) (text string, stopped bool)
}

var corpusProtocols = []corpusProtocol{
	{"openai", "/v1/chat/completions",
		func(s, l json.RawMessage, n int) string {
			return fmt.Sprintf(`{"model":"tiny","max_tokens":%d,"messages":[{"role":"user","content":"Reply in JSON."}],"nvmai_format_limits":%s,`+
				`"response_format":{"type":"json_schema","json_schema":{"name":"corpus","strict":true,"schema":%s}}}`, n, l, s)
		},
		func(t *testing.T, b []byte) (string, bool) {
			var r struct {
				Choices []struct {
					Message      struct{ Content string }
					FinishReason string `json:"finish_reason"`
				}
			}
			decodeReply(t, b, &r)
			if len(r.Choices) != 1 {
				t.Fatalf("%d choices: %s", len(r.Choices), b)
			}
			return r.Choices[0].Message.Content, r.Choices[0].FinishReason == "stop"
		}},
	{"anthropic", "/v1/messages",
		func(s, l json.RawMessage, n int) string {
			return fmt.Sprintf(`{"model":"tiny","max_tokens":%d,"messages":[{"role":"user","content":"Reply in JSON."}],"nvmai_format_limits":%s,`+
				`"output_format":{"type":"json_schema","schema":%s}}`, n, l, s)
		},
		func(t *testing.T, b []byte) (string, bool) {
			var r struct {
				Content []struct {
					Type, Text string
				}
				StopReason string `json:"stop_reason"`
			}
			decodeReply(t, b, &r)
			var text string
			for _, c := range r.Content {
				if c.Type == "text" {
					text += c.Text
				}
			}
			return text, r.StopReason == "end_turn"
		}},
	{"responses", "/v1/responses",
		func(s, l json.RawMessage, n int) string {
			return fmt.Sprintf(`{"model":"tiny","max_output_tokens":%d,"input":"Reply in JSON.","store":false,"nvmai_format_limits":%s,`+
				`"text":{"format":{"type":"json_schema","name":"corpus","strict":true,"schema":%s}}}`, n, l, s)
		},
		func(t *testing.T, b []byte) (string, bool) {
			var r struct {
				Status string
				Output []struct {
					Type    string
					Content []struct{ Type, Text string }
				}
			}
			decodeReply(t, b, &r)
			var text string
			for _, o := range r.Output {
				for _, c := range o.Content {
					if c.Type == "output_text" {
						text += c.Text
					}
				}
			}
			return text, r.Status == "completed"
		}},
}

func decodeReply(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("reply %s: %v", b, err)
	}
}

// corpusHost serves the tiny model through the core on all three
// protocols, sampling every request at temperature 1 with nothing else
// (no top-k, top-p or min-p: the generation_config's top_k 20 would hide
// most of the vocabulary from the mask) and the given seed, which the
// Anthropic and Responses protocols cannot send.
func corpusHost(re *server.RuntimeEngine, seed uint64) http.Handler {
	temp, topK, topP := 1.0, 0, 1.0
	s := server.New(server.Config{Log: func(server.RequestLog) {},
		Defaults: server.Defaults{Temperature: &temp, TopK: &topK, TopP: &topP, Seed: &seed}})
	s.SetEngine(re, server.PlainChatML{})
	h := httpapi.New(s, httpapi.Options{})
	openai.New(s, openai.Options{}).Mount(h)
	anthropic.New(s, anthropic.Options{}).Mount(h)
	responses.New(s, responses.Options{}).Mount(h)
	return h
}

// corpusLimits are the nvmai_format_limits a corpus request sends, tried
// in order: the first under which its schema compiles (the lengths of
// pkg/jsonconstrain's corpusOptions). A random-weight model closes a
// string about once in a few hundred tokens and opens every value an
// additionalProperties allows, so under nvmai's defaults (4,096
// characters a string, 256 extra keys an object) its documents run past
// any max_tokens a test can afford. The limits only tighten what the
// schema allows, so what the validator judges is the same; with them every
// reply ends on an end token within corpusMaxTokens and is validated. A
// schema that needs longer strings (a uuid or date-time format, a
// minLength) gets the second; one that needs more still, none.
var corpusLimits = []json.RawMessage{
	json.RawMessage(`{"max_depth":8,"max_string_chars":24,"max_key_bytes":32,"max_items":4,"max_extra_properties":2,"max_whitespace":2}`),
	json.RawMessage(`{"max_depth":8,"max_string_chars":64,"max_key_bytes":32,"max_items":4,"max_extra_properties":2,"max_whitespace":2}`),
	json.RawMessage(`null`),
}

// limitsFor is the first of corpusLimits under which schema compiles.
func limitsFor(t *testing.T, schema json.RawMessage) (int, *jsonconstrain.Schema) {
	t.Helper()
	var lastErr error
	for i, l := range corpusLimits {
		opts, err := server.FormatOptions(l)
		if err != nil {
			t.Fatal(err)
		}
		s, err := jsonconstrain.CompileWithOptions(schema, opts)
		if err == nil {
			return i, s
		}
		lastErr = err
	}
	t.Fatalf("the schema does not compile: %v", lastErr)
	return 0, nil
}

// corpusMaxTokens is each request's max_tokens: under corpusLimits the
// tiny model's longest corpus document takes a few hundred tokens.
const corpusMaxTokens = 2048

// The acceptance through the server: a random-weight model at
// temperature 1 answers corpus schemas given as OpenAI chat
// response_format, Anthropic output_format and Responses text.format
// (each with nvmai_format_limits, see corpusLimits), and every reply ends
// on an end token with a document that santhosh-tekuri/jsonschema
// (formats asserted) accepts. The quick run takes corpusSubset with 3
// seeds on each protocol (1 under -race or -short); NVMAI_LONG_TESTS=1
// takes every corpus schema nvmai compiles with 20 seeds, each seed on one
// protocol in turn (7, 7 and 6 a protocol: 20 requests a schema).
func TestCorpusThroughTheServer(t *testing.T) {
	corpus := loadCorpus(t)
	names, seeds, long := corpusSubset, 3, os.Getenv("NVMAI_LONG_TESTS") != ""
	if testfix.Quick(raceEnabled) {
		seeds = 1
	}
	if long {
		names, seeds = compiledCorpus(corpus), 20
	}
	_, re := adaptertest.TinyServer(adaptertest.TinyEngine(t), server.RuntimeOptions{ModelID: "tiny", PrefillChunk: 16})
	runCorpus(t, re, corpus, names, seeds, long)
}

// compiledCorpus names every corpus schema nvmai compiles, sorted.
func compiledCorpus(corpus map[string]json.RawMessage) []string {
	var names []string
	for name, s := range corpus {
		if _, err := jsonconstrain.Compile(s); err == nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// runCorpus sends each named schema with seeds 1..seeds on every protocol
// (rotate: seed i on protocol i mod 3 only) and validates every reply.
func runCorpus(t *testing.T, re *server.RuntimeEngine, corpus map[string]json.RawMessage, names []string, seeds int, rotate bool) {
	hosts := make([]http.Handler, seeds)
	for seed := range hosts {
		hosts[seed] = corpusHost(re, uint64(seed)+1)
	}
	start := time.Now()
	requests, tokens := 0, 0
	tiers := make([]int, len(corpusLimits))
	for _, name := range names {
		schema, ok := corpus[name]
		if !ok {
			t.Fatalf("corpus has no %s", name)
		}
		t.Run(name, func(t *testing.T) {
			tier, _ := limitsFor(t, schema)
			tiers[tier]++
			limits := corpusLimits[tier]
			sch := independentValidator(t, schema)
			for pi, p := range corpusProtocols {
				for seed, h := range hosts {
					if rotate && seed%len(corpusProtocols) != pi {
						continue
					}
					rec := httptest.NewRecorder()
					req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+p.path, strings.NewReader(p.body(schema, limits, corpusMaxTokens)))
					req.Header.Set("Content-Type", "application/json")
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						t.Fatalf("%s seed %d: %d %s", p.name, seed+1, rec.Code, rec.Body)
					}
					requests++
					text, stopped := p.reply(t, rec.Body.Bytes())
					tokens += len(text)
					if !stopped {
						t.Errorf("%s seed %d: the reply did not end on an end token within max_tokens %d: %s", p.name, seed+1, corpusMaxTokens, rec.Body)
						continue
					}
					if err := sch.Check([]byte(text)); err != nil {
						t.Errorf("%s seed %d: %q does not validate: %v", p.name, seed+1, text, err)
					}
				}
			}
		})
	}
	t.Logf("%d schemas (%v under each of corpusLimits), %d seeds, %d requests (%d document bytes), in %v", len(names), tiers, seeds, requests, tokens, time.Since(start).Round(time.Millisecond))
}

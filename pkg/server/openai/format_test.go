package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

func TestResponseFormatErrors(t *testing.T) {
	h := newHarness(t, &servertest.Engine{}, hostOptions{}, server.Config{})
	const schemaParam = "response_format.json_schema.schema"
	cases := []struct {
		name, format, want, param string
	}{
		{"unsupported keyword named", `{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"name":{"type":"array","uniqueItems":true}}}}}`,
			`unsupported schema keyword "uniqueItems" at /properties/name/uniqueItems`, schemaParam},
		{"every unsupported keyword named", `{"type":"json_schema","json_schema":{"name":"p","schema":{"uniqueItems":true,"not":{}}}}`,
			`"not" at /not; unsupported schema keyword "uniqueItems" at /uniqueItems`, schemaParam},
		{"unknown type", `{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"text"}}}`, `unknown type "text" at /type`, schemaParam},
		{"contradictory bounds", `{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"array","minItems":3,"maxItems":2}}}`, "minItems 3 is over maxItems 2", schemaParam},
		{"schema missing", `{"type":"json_schema","json_schema":{"name":"p"}}`, "is missing", schemaParam},
		{"schema not JSON object", `{"type":"json_schema","json_schema":{"name":"p","schema":false}}`, "allows no value", schemaParam},
		{"unknown format type", `{"type":"xml"}`, `"xml" is not one of`, "response_format.type"},
		{"format not an object", `"json"`, "must be an object", "response_format"},
		{"forced tool call with a format", `{"type":"json_object"}`, "forces a tool call", "tool_choice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			extra := ""
			if strings.Contains(tc.name, "tool") {
				extra = `"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required",`
			}
			body := `{` + extra + `"response_format":` + tc.format + `,"messages":[{"role":"user","content":"x"}]}`
			status, _, resp := h.post("/v1/chat/completions", "application/json", body)
			e := adaptertest.DecodeOpenAIError(t, resp)
			if status != 400 || e.Type != "invalid_request_error" || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("%d %s %q, want 400 invalid_request_error containing %q", status, e.Type, e.Message, tc.want)
			}
			if e.Param == nil || *e.Param != tc.param {
				t.Fatalf("param %v, want %q", e.Param, tc.param)
			}
		})
	}
	if n := len(h.eng.Generations()); n != 0 {
		t.Fatalf("%d refused requests reached the engine", n)
	}
}

// response_format reaches the engine as Generation.Format; text and an
// absent field are no constraint. With tool_choice auto the format wins:
// the tools are not rendered.
func TestResponseFormatReachesTheEngine(t *testing.T) {
	eng := &servertest.Engine{Script: script(`{"a"`, `:1}`)}
	h := newHarness(t, eng, hostOptions{}, server.Config{})
	cases := []struct {
		format string
		want   bool
	}{
		{``, false},
		{`"response_format":null,`, false},
		{`"response_format":{"type":"text"},`, false},
		{`"response_format":{"type":"json_object"},`, true},
		{`"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}}},`, true},
		{`"tools":[{"type":"function","function":{"name":"f"}}],"stop":["}"],"response_format":{"type":"json_object"},`, true},
	}
	for i, tc := range cases {
		body := `{` + tc.format + `"messages":[{"role":"user","content":"x"}]}`
		status, _, resp := h.post("/v1/chat/completions", "application/json", body)
		if status != 200 {
			t.Fatalf("%s: %d %s", body, status, resp)
		}
		gens, prompts := eng.Generations(), eng.Prompts()
		g := gens[len(gens)-1]
		if (g.Format != nil) != tc.want || g.FormatAfterThink {
			t.Fatalf("%s: Format set %v (after think %v), want %v", body, g.Format != nil, g.FormatAfterThink, tc.want)
		}
		if strings.Contains(prompts[len(prompts)-1], "<tools>") {
			t.Fatalf("case %d: the tools were rendered beside a response_format", i)
		}
		if tc.want && !strings.Contains(resp, `"content":"{\"a\":1}"`) {
			t.Fatalf("case %d: a stop string cut the document: %s", i, resp)
		}
	}
	// Thinking on: the constraint starts after </think>.
	if st, _, resp := h.post("/v1/chat/completions", "application/json", `{"reasoning_effort":"high","response_format":{"type":"json_object"},"messages":[{"role":"user","content":"x"}]}`); st != 200 {
		t.Fatalf("%d %s", st, resp)
	}
	if gens := eng.Generations(); !gens[len(gens)-1].FormatAfterThink {
		t.Fatal("thinking on: FormatAfterThink not set")
	}
}

// End to end through the OpenAI Go SDK on the tiny model: a json_schema
// reply parses and validates for greedy and sampled requests, streamed
// and not.
func TestTinyModelResponseFormatThroughTheSDK(t *testing.T) {
	ts := newTinyServer(t, 64<<20)
	var schema map[string]any
	if err := json.Unmarshal([]byte(sdkPetSchema), &schema); err != nil {
		t.Fatal(err)
	}
	format := oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &oai.ResponseFormatJSONSchemaParam{
		JSONSchema: oai.ResponseFormatJSONSchemaJSONSchemaParam{Name: "pet", Strict: oai.Bool(true), Schema: schema},
	}}
	for _, s := range []struct {
		temp float64
		seed int64
	}{{0, 0}, {0.8, 1}, {1.2, 2}, {1.5, 3}} {
		t.Run(fmt.Sprintf("t%v-seed%d", s.temp, s.seed), func(t *testing.T) {
			p := oai.ChatCompletionNewParams{Model: "tiny", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Describe a pet as JSON.")},
				Temperature: oai.Float(s.temp), Seed: oai.Int(s.seed), MaxTokens: oai.Int(600), ResponseFormat: format}
			r := ts.chat(t, p)
			got := r.Choices[0].Message.Content
			if r.Choices[0].FinishReason != "stop" {
				t.Fatalf("finish %q: %q", r.Choices[0].FinishReason, got)
			}
			var pet struct {
				Name string      `json:"name"`
				Age  json.Number `json:"age"`
				Kind string      `json:"kind"`
				Tags []string    `json:"tags"`
			}
			dec := json.NewDecoder(strings.NewReader(got))
			dec.DisallowUnknownFields()
			dec.UseNumber()
			if err := dec.Decode(&pet); err != nil || !strings.Contains(got, `"name"`) || strings.ContainsAny(pet.Age.String(), ".eE") || pet.Age == "" || !strings.Contains(got, `"tags"`) ||
				(pet.Kind != "cat" && pet.Kind != "dog") || len(pet.Tags) > 2 {
				t.Fatalf("%q does not validate: %v %+v", got, err, pet)
			}
			stream := ts.client.Chat.Completions.NewStreaming(context.Background(), p)
			var acc oai.ChatCompletionAccumulator
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if acc.Choices[0].Message.Content != got {
				t.Fatalf("streamed %q, non-streamed %q", acc.Choices[0].Message.Content, got)
			}
		})
	}
}

const sdkPetSchema = `{"type":"object","properties":{
	"name":{"type":"string","minLength":1,"maxLength":10},
	"age":{"type":"integer"},
	"kind":{"enum":["cat","dog"]},
	"tags":{"type":"array","items":{"type":"string","maxLength":5},"maxItems":2}},
	"required":["name","age","kind","tags"],"additionalProperties":false}`

// json_object with nvmai's default limits: any object, which parses.
func TestTinyModelJSONObjectThroughTheSDK(t *testing.T) {
	ts := newTinyServer(t, 0)
	format := oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &oai.ResponseFormatJSONObjectParam{}}
	for seed := range int64(4) {
		p := oai.ChatCompletionNewParams{Model: "tiny", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Reply in JSON.")},
			Temperature: oai.Float(float64(seed) * 0.5), Seed: oai.Int(seed), MaxTokens: oai.Int(2000), ResponseFormat: format}
		r := ts.chat(t, p)
		got := r.Choices[0].Message.Content
		var v map[string]any
		if err := json.Unmarshal([]byte(got), &v); err != nil || r.Choices[0].FinishReason != "stop" {
			t.Fatalf("seed %d: finish %q, %v: %q", seed, r.Choices[0].FinishReason, err, got)
		}
		t.Logf("seed %d: %d tokens", seed, r.Usage.CompletionTokens)
	}
}

// FuzzResponseFormatRequest: whatever response_format holds, a chat
// request is either refused with a 400 envelope or prepared, never a
// panic.
func FuzzResponseFormatRequest(f *testing.F) {
	for _, s := range []string{
		`{"type":"json_object"}`,
		`{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"a":{"type":"array","items":{"enum":[1,"x",null]}}},"required":["a"]}}}`,
		`{"type":"json_schema","json_schema":{"schema":{"anyOf":[{"type":"string"},{"type":"null"}]}}}`,
		`{"type":"json_schema","json_schema":{"schema":{"$ref":"#"}}}`,
		`{"type":"text"}`, `null`, `[]`, `{"type":7}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, format []byte, tools bool) {
		extra := ""
		if tools {
			extra = `"tools":[{"type":"function","function":{"name":"f"}}],`
		}
		body := `{` + extra + `"response_format":` + string(format) + `,"messages":[{"role":"user","content":"hi"}]}`
		var req chatRequest
		if httpapi.Decode(strings.NewReader(body), &req) != nil {
			return
		}
		creq, err := toChat(&req, samplingDefaults)
		if err != nil {
			var ae *httpapi.Error
			if !errors.As(err, &ae) || ae.Status != 400 || ae.Param == "" {
				t.Fatalf("%s: %v is not a 400 naming a field", format, err)
			}
			return
		}
		prepareOnFake(creq)
	})
}

// /v1/completions takes response_format too: it reaches the engine, a bad
// schema is the same 400, and stop strings do not cut the document.
func TestCompletionsResponseFormat(t *testing.T) {
	eng := &servertest.Engine{Script: script(`{"a"`, `:1}`)}
	h := newHarness(t, eng, hostOptions{}, server.Config{})
	status, _, resp := h.post("/v1/completions", "application/json", `{"prompt":"x","stop":[":"],"response_format":{"type":"json_object"}}`)
	if status != 200 || !strings.Contains(resp, `"text":"{\"a\":1}"`) {
		t.Fatalf("%d %s", status, resp)
	}
	if gens := eng.Generations(); gens[len(gens)-1].Format == nil {
		t.Fatal("response_format did not reach the engine")
	}
	status, _, resp = h.post("/v1/completions", "application/json", `{"prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":{"type":"array","uniqueItems":true}}}}`)
	if status != 400 || !strings.Contains(resp, `unsupported schema keyword \"uniqueItems\" at /uniqueItems`) || !strings.Contains(resp, `"param":"response_format.json_schema.schema"`) {
		t.Fatalf("%d %s", status, resp)
	}
}

// On the tiny model a raw completion with a json_schema is a valid
// document.
func TestTinyModelCompletionResponseFormat(t *testing.T) {
	ts := newTinyServer(t, 0)
	body := `{"model":"tiny","prompt":"A pet:","max_tokens":600,"temperature":0.9,"seed":5,"response_format":{"type":"json_schema","json_schema":{"name":"pet","schema":` + sdkPetSchema + `}}}`
	var resp struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := ts.client.Post(context.Background(), "completions", json.RawMessage(body), &resp); err != nil {
		t.Fatal(err)
	}
	var pet map[string]any
	if c := resp.Choices[0]; c.FinishReason != "stop" || json.Unmarshal([]byte(c.Text), &pet) != nil || pet["kind"] != "cat" && pet["kind"] != "dog" {
		t.Fatalf("%+v", resp.Choices)
	}
}

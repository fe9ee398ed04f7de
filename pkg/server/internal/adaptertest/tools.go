package adaptertest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// ToolCorpus are tools whose calls the forced-call tests generate with
// random weights: raw strings (bounded, so that random output closes
// them), an enum, a bounded integer, a boolean, a nested object with an
// array, a $ref into $defs, a nullable integer, and a tool without
// parameters. Each is {name, description, parameters}.
var ToolCorpus = []ToolSpec{
	{"get_weather", "Weather of a city", `{"type":"object","properties":{
		"city":{"type":"string","maxLength":10},
		"days":{"type":"integer","minimum":1,"maximum":14},
		"unit":{"type":"string","enum":["celsius","fahrenheit"]},
		"detail":{"type":"boolean"}},
		"required":["city","days"]}`},
	{"write_file", "Write a file", `{"type":"object","properties":{
		"path":{"type":"string","minLength":1,"maxLength":12},
		"content":{"type":"string","maxLength":20},
		"options":{"type":"object","properties":{"mode":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","maxLength":5},"maxItems":3}},"required":["mode"],"additionalProperties":false}},
		"required":["path","content"]}`},
	{"noop", "Do nothing", `{"type":"object","properties":{}}`},
	{"search", "Search", `{"type":"object","$defs":{"Q":{"type":"object","properties":{"q":{"type":"string","maxLength":8}},"required":["q"],"additionalProperties":false}},
		"properties":{"query":{"$ref":"#/$defs/Q"},"limit":{"anyOf":[{"type":"integer","maximum":99},{"type":"null"}]}},
		"required":["query"]}`},
}

// ToolSpec is one tool of ToolCorpus.
type ToolSpec struct {
	Name, Description, Parameters string
}

// OpenAITools is ToolCorpus as chat completions' tools.
func OpenAITools() []map[string]any {
	return toolsAs(func(t ToolSpec) map[string]any {
		return map[string]any{"type": "function", "function": map[string]any{
			"name": t.Name, "description": t.Description, "parameters": json.RawMessage(t.Parameters)}}
	})
}

// AnthropicTools is ToolCorpus as the Messages API's tools.
func AnthropicTools() []map[string]any {
	return toolsAs(func(t ToolSpec) map[string]any {
		return map[string]any{"name": t.Name, "description": t.Description, "input_schema": json.RawMessage(t.Parameters)}
	})
}

// ResponsesTools is ToolCorpus as the Responses API's tools.
func ResponsesTools() []map[string]any {
	return toolsAs(func(t ToolSpec) map[string]any {
		return map[string]any{"type": "function", "name": t.Name, "description": t.Description, "parameters": json.RawMessage(t.Parameters)}
	})
}

func toolsAs(shape func(ToolSpec) map[string]any) []map[string]any {
	var out []map[string]any
	for _, t := range ToolCorpus {
		out = append(out, shape(t))
	}
	return out
}

// TinyToolEngine is the tiny model (TinyEngine) behind a runtime engine
// with model id "tiny", for the forced-call tests.
func TinyToolEngine(t *testing.T) *server.RuntimeEngine {
	t.Helper()
	return server.NewRuntimeEngine(TinyEngine(t), server.RuntimeOptions{ModelID: "tiny", PrefillChunk: 16})
}

// ToolCall is one call a reply holds: the tool's name and its arguments.
type ToolCall struct {
	Name      string
	Arguments json.RawMessage
}

// CheckForcedCalls checks one reply of the forced-call tests: it stopped
// with one of stops (a finished call, or a cut that leaves the cut call
// out), it holds at least one call, and every call names a tool of
// ToolCorpus and validates against its schema. stop names the protocol's
// field in the failure, and reply is shown with it.
func CheckForcedCalls(t *testing.T, field, stop string, stops [2]string, calls []ToolCall, reply any) {
	t.Helper()
	if (stop != stops[0] && stop != stops[1]) || len(calls) == 0 {
		t.Fatalf("%s %s, %d calls, reply %+v", field, stop, len(calls), reply)
	}
	for _, c := range calls {
		if err := CheckToolCall(c.Name, c.Arguments); err != nil {
			t.Fatal(err)
		}
	}
}

// ConstrainToolsCase is one request of the nvmai_constrain_tools tests:
// the field's value (nil: absent), whether serve --no-constrain-tools is
// on, and whether the engine should be given the tools to constrain.
type ConstrainToolsCase struct {
	Name         string
	Field        any
	NoConstraint bool
	Want         bool
}

// CheckConstrainTools posts body (a request with tools) to path on the
// adapter mount mounts, over a scripted engine, once a case with its
// field, and checks whether the engine was asked to constrain the tools.
func CheckConstrainTools(t *testing.T, cases []ConstrainToolsCase, mount func(*server.Server) http.Handler, path string, body func() map[string]any) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			e := &servertest.Engine{}
			s := server.New(server.Config{Log: func(server.RequestLog) {}, NoToolConstraint: tc.NoConstraint})
			s.SetEngine(e, servertest.Renderer{})
			hs := ToolServerOver(t, s, mount)
			b := body()
			if tc.Field != nil {
				b["nvmai_constrain_tools"] = tc.Field
			}
			var resp map[string]any
			PostJSON(t, hs, path, b, &resp)
			if got := e.Generations()[0].Tools != nil; got != tc.Want {
				t.Fatalf("nvmai_constrain_tools %v, --no-constrain-tools %v: constrained %v, want %v", tc.Field, tc.NoConstraint, got, tc.Want)
			}
		})
	}
}

// CheckToolCall checks that name is a tool of ToolCorpus and that args
// validates against its parameters schema, with santhosh-tekuri/jsonschema
// (independent of the constraint that produced it).
func CheckToolCall(name string, args json.RawMessage) error {
	for _, t := range ToolCorpus {
		if t.Name != name {
			continue
		}
		var schema, v any
		if err := json.Unmarshal([]byte(t.Parameters), &schema); err != nil {
			return err
		}
		if err := json.Unmarshal(args, &v); err != nil {
			return fmt.Errorf("arguments %s of %s are not JSON: %v", args, name, err)
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource(name+".json", schema); err != nil {
			return err
		}
		s, err := c.Compile(name + ".json")
		if err != nil {
			return err
		}
		if err := s.Validate(v); err != nil {
			return fmt.Errorf("arguments %s of %s: %v", args, name, err)
		}
		return nil
	}
	return fmt.Errorf("a call of %q, which is not a declared tool", name)
}

// ToolServer serves re (the tiny engine) behind a core server whose
// template renders tools (servertest.Renderer), with serve --seed seed, so
// that protocols without a seed field are reproducible. mount mounts the
// adapter under test on the host.
func ToolServer(t *testing.T, re *server.RuntimeEngine, seed uint64, cfg server.Config, mount func(*server.Server) http.Handler) *httptest.Server {
	t.Helper()
	cfg.Defaults.Seed = &seed
	if cfg.Log == nil {
		cfg.Log = func(server.RequestLog) {}
	}
	s := server.New(cfg)
	s.SetEngine(re, servertest.Renderer{})
	hs := httptest.NewServer(mount(s))
	t.Cleanup(hs.Close)
	return hs
}

// PostJSON posts body to hs's path and decodes the 200 answer into out.
func PostJSON(t *testing.T, hs *httptest.Server, path string, body any, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hs.Client().Post(hs.URL+path, "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", path, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%v in %s", err, raw)
	}
}

// ToolServerOver serves s through the adapter mount mounts.
func ToolServerOver(t *testing.T, s *server.Server, mount func(*server.Server) http.Handler) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(mount(s))
	t.Cleanup(hs.Close)
	return hs
}

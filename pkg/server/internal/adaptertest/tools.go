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
	var out []map[string]any
	for _, t := range ToolCorpus {
		out = append(out, map[string]any{"type": "function", "function": map[string]any{
			"name": t.Name, "description": t.Description, "parameters": json.RawMessage(t.Parameters)}})
	}
	return out
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

package openai

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// TestSeveralModelsHTTP: with several models, the OpenAI endpoints take
// the model from the request: /v1/models lists every one, an unknown one
// is 404 model_not_found naming them, a load failure is a 500 with the
// reason even for a stream (the stream starts only once the model is in),
// and /health says which model is in memory.
func TestSeveralModelsHTTP(t *testing.T) {
	m := &servertest.Models{IDs: []string{"b", "a", "bad"}, Fail: map[string]error{"bad": errors.New("resident.bin: sha256 mismatch")}}
	off := false
	s := server.New(server.Config{Log: func(server.RequestLog) {}, Thinking: &off})
	if err := s.SetModels(m, 0); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(host(s))
	defer hs.Close()
	h := &harness{t: t, http: hs}
	get := func(path string) (int, map[string]any) {
		resp, err := hs.Client().Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	if code, v := get("/health"); code != 200 || v["model"] != nil {
		t.Errorf("health before any load: %d %v", code, v)
	}
	_, v := get("/v1/models")
	var ids []string
	for _, d := range v["data"].([]any) {
		ids = append(ids, d.(map[string]any)["id"].(string))
	}
	if strings.Join(ids, ",") != "a,b,bad" {
		t.Errorf("/v1/models: %v", ids)
	}
	chat := func(model string, stream bool) string {
		return `{"model":"` + model + `","stream":` + map[bool]string{true: "true", false: "false"}[stream] + `,"messages":[{"role":"user","content":"hi"}]}`
	}
	cases := []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"chat on b", "/v1/chat/completions", chat("b", false), 200, `"model":"b"`},
		{"stream on a", "/v1/chat/completions", chat("a", true), 200, `"model":"a"`},
		{"completion on b", "/v1/completions", `{"model":"b","prompt":"x"}`, 200, `"model":"b"`},
		{"unknown", "/v1/chat/completions", chat("gpt-4o", false), 404, `"code":"model_not_found"`},
		{"unknown names the models", "/v1/completions", `{"model":"gpt-4o","prompt":"x"}`, 404, `the models are: a, b, bad`},
		{"load failure", "/v1/chat/completions", chat("bad", false), 500, `sha256 mismatch`},
		{"load failure in a stream", "/v1/chat/completions", chat("bad", true), 500, `sha256 mismatch`},
		{"template of a model not loaded", "/apply-template", `{"model":"b","messages":[{"role":"user","content":"hi"}]}`, 503, `not loaded`},
		{"after the failure", "/v1/chat/completions", chat("a", false), 200, `"content":"model a"`},
		{"template of the loaded model", "/apply-template", `{"model":"a","messages":[{"role":"user","content":"hi"}]}`, 200, `<|im_start|>user`},
	}
	for _, c := range cases {
		code, hdr, body := h.post(c.path, "application/json", c.body)
		if code != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s\n%s", c.name, code, hdr.Get("Content-Type"), body)
		}
		if c.status != 200 && !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
			t.Errorf("%s: an error as %s, want a JSON envelope", c.name, hdr.Get("Content-Type"))
		}
	}
	if code, v := get("/health"); code != 200 || v["model"] != "a" {
		t.Errorf("health: %d %v", code, v)
	}
}

// With one model (--model) the request's model field is ignored, as
// before: any name is served by the loaded model, under its own id.
func TestOneModelIgnoresModelField(t *testing.T) {
	h := newHarness(t, &servertest.Engine{}, hostOptions{}, server.Config{})
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
		if path == "/v1/completions" {
			body = `{"model":"gpt-4o","prompt":"hi"}`
		}
		code, _, resp := h.post(path, "application/json", body)
		if code != 200 || !strings.Contains(resp, `"model":"fake-model"`) {
			t.Errorf("%s: %d %s", path, code, resp)
		}
	}
}

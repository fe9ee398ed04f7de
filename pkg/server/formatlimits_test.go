package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
)

// nvmai_format_limits only lowers nvmai's defaults; anything else is
// refused with the field named.
func TestFormatOptions(t *testing.T) {
	def := jsonconstrain.DefaultOptions
	cases := []struct {
		name, raw string
		want      func(o *jsonconstrain.Options)
		err       string
	}{
		{"absent", ``, func(*jsonconstrain.Options) {}, ""},
		{"null", `null`, func(*jsonconstrain.Options) {}, ""},
		{"all", `{"max_string_chars":24,"max_key_bytes":32,"max_items":4,"max_extra_properties":0,"max_depth":8,"max_whitespace":0}`,
			func(o *jsonconstrain.Options) {
				o.MaxStringChars, o.MaxKeyBytes, o.MaxItems, o.MaxExtraProperties, o.MaxDepth, o.MaxWhitespace = 24, 32, 4, 0, 8, 0
			}, ""},
		{"the default itself", `{"max_items":1024}`, func(*jsonconstrain.Options) {}, ""},
		{"above the default", `{"max_string_chars":5000}`, nil, "nvmai_format_limits.max_string_chars 5000: must be from 0 to 4096"},
		{"negative", `{"max_items":-1}`, nil, "nvmai_format_limits.max_items -1"},
		{"depth 0", `{"max_depth":0}`, nil, "nvmai_format_limits.max_depth 0: must be from 1"},
		{"unknown key", `{"max_strings":3}`, nil, `unknown field "max_strings"`},
		{"not an object", `[1]`, nil, "nvmai_format_limits must be an object"},
		{"not an integer", `{"max_items":2.5}`, nil, "nvmai_format_limits must be an object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := server.FormatOptions(json.RawMessage(c.raw))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := def
			c.want(&want)
			if got != want {
				t.Fatalf("options %+v, want %+v", got, want)
			}
		})
	}
}

// Every protocol reads nvmai_format_limits: a bad value is a 400 naming
// it, and a limit holds in the reply (strings of at most 3 characters).
func TestFormatLimitsOnEveryProtocol(t *testing.T) {
	_, re := adaptertest.TinyServer(adaptertest.TinyEngine(t), server.RuntimeOptions{ModelID: "tiny", PrefillChunk: 16})
	schema := json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array","items":{"type":"string"}}},"required":["a","b"],"additionalProperties":false}`)
	for _, p := range corpusProtocols {
		t.Run(p.name, func(t *testing.T) {
			for seed := range 3 {
				h := corpusHost(re, uint64(seed)+1)
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+p.path, strings.NewReader(p.body(schema, json.RawMessage(`{"max_string_chars":3,"max_items":2}`), 512)))
				req.Header.Set("Content-Type", "application/json")
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					t.Fatalf("%d %s", rec.Code, rec.Body)
				}
				text, stopped := p.reply(t, rec.Body.Bytes())
				var doc struct {
					A string
					B []string
				}
				if err := json.Unmarshal([]byte(text), &doc); err != nil || !stopped {
					t.Fatalf("reply %q (ended %v): %v", text, stopped, err)
				}
				if utf8.RuneCountInString(doc.A) > 3 || len(doc.B) > 2 {
					t.Fatalf("the limits do not hold: %q", text)
				}
				for _, s := range doc.B {
					if utf8.RuneCountInString(s) > 3 {
						t.Fatalf("the limits do not hold: %q", text)
					}
				}
			}
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+p.path, strings.NewReader(p.body(schema, json.RawMessage(`{"max_items":5000}`), 16)))
			req.Header.Set("Content-Type", "application/json")
			corpusHost(re, 1).ServeHTTP(rec, req)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "nvmai_format_limits.max_items 5000") {
				t.Fatalf("a limit above the default: %d %s", rec.Code, rec.Body)
			}
		})
	}
}

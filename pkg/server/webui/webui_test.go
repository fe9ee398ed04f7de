package webui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/openai"
	"github.com/nvmai/nvmai/pkg/server/servertest"
	"github.com/nvmai/nvmai/pkg/server/webui"
)

// The page and its assets load without the API key, each with its type,
// the Content-Security-Policy (no inline script, no eval) and nosniff;
// the API beside them still needs the key.
func TestPageAndAssetsHeaders(t *testing.T) {
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(&servertest.Engine{}, servertest.Renderer{})
	h := httpapi.New(s, httpapi.Options{APIKey: "k"})
	openai.New(s, openai.Options{}).Mount(h)
	webui.Mount(h)
	hs := httptest.NewServer(h)
	defer hs.Close()
	for _, c := range []struct{ path, ctype, contains string }{
		{"/", "text/html; charset=utf-8", `<script type="module" src="/ui/app.js">`},
		{"/ui/app.js", "text/javascript; charset=utf-8", "renderMarkdown"},
		{"/ui/markdown.js", "text/javascript; charset=utf-8", "export function renderMarkdown"},
		{"/ui/style.css", "text/css; charset=utf-8", "prefers-color-scheme"},
		{"/ui/icon.svg", "image/svg+xml", "<svg"},
	} {
		resp, err := hs.Client().Get(hs.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != c.ctype || !strings.Contains(string(body), c.contains) {
			t.Errorf("GET %s: %d %q, body has %q: %v", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.contains, strings.Contains(string(body), c.contains))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "script-src 'self';", "style-src 'self';"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: CSP %q lacks %q", c.path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-") {
			t.Errorf("GET %s: CSP %q allows unsafe sources", c.path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no X-Content-Type-Options: nosniff", c.path)
		}
	}
	for _, path := range []string{"/v1/models", "/v1/live.json"} {
		resp, err := hs.Client().Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the key: %d, want 401", path, resp.StatusCode)
		}
	}
}

// The page holds no inline script or style and no handler attributes
// (the CSP would block them anyway), and the scripts never parse model
// text as HTML.
func TestPageHasNoInlineCodeAndScriptsNoHTMLSinks(t *testing.T) {
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	h := httpapi.New(s, httpapi.Options{})
	webui.Mount(h)
	get := func(path string) string {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Host = "127.0.0.1"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Body.String()
	}
	page := get("/")
	for _, bad := range []string{"<script>", "<style", " style=", " onclick=", " onload=", "javascript:"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page contains %q", bad)
		}
	}
	for _, js := range []string{"/ui/app.js", "/ui/markdown.js"} {
		src := get(js)
		for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('on", "DOMParser"} {
			if strings.Contains(src, sink) {
				t.Errorf("%s uses %s", js, sink)
			}
		}
	}
}

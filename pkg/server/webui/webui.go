// Package webui is serve's web page: one page at GET / (static/index.html)
// and its assets under /ui/, embedded in the binary. The page is
// hand-written HTML, CSS and JavaScript with no framework and no build
// step, so what is served is what is in static/. It chats through
// /v1/chat/completions and shows /v1/live (docs/server.md, "The web
// page").
//
// The page and its assets need no API key (they hold no data); every API
// call the page makes carries the key the user typed, kept in the tab's
// sessionStorage. Model output reaches the page only through textContent
// (static/markdown.js builds DOM nodes, never HTML), and the
// Content-Security-Policy allows scripts and styles from this server only,
// no inline script and no eval, so text a model writes cannot run.
package webui

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
)

//go:embed static
var static embed.FS

// PagePath is where the page is served; AssetPrefix is where its assets are.
const (
	PagePath    = "/"
	AssetPrefix = "/ui/"
)

// ContentSecurityPolicy is sent with the page and every asset: scripts,
// styles, images and fetches from this server only; no inline script or
// style element, no eval, no plug-ins, no framing, no form posts.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// contentTypes are the types of the files in static/, set explicitly: a
// module script must be served as JavaScript, and nosniff makes the
// browser hold the server to the type it says.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// Mount adds GET / and GET /ui/FILE for every file of static/ to h. They
// are open routes: the page must load before the user has typed a key.
func Mount(h *httpapi.Host) {
	files, _ := fs.Sub(static, "static")
	fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		route := AssetPrefix + p
		if p == "index.html" {
			route = PagePath
		}
		h.Mount(route, httpapi.Route{Method: http.MethodGet, Open: true, Serve: serveFile(body, contentTypes[path.Ext(p)])})
		return nil
	})
}

func serveFile(body []byte, contentType string) func(http.ResponseWriter, *http.Request, *server.RequestLog) error {
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	return func(w http.ResponseWriter, r *http.Request, _ *server.RequestLog) error {
		hd := w.Header()
		hd.Set("Content-Type", contentType)
		hd.Set("Content-Security-Policy", ContentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		// The binary is the version: a new one may change every file, so
		// the browser asks each time (a 304 would save little here).
		hd.Set("Cache-Control", "no-cache")
		if strings.HasPrefix(contentType, "text/html") {
			hd.Set("Cache-Control", "no-store")
		}
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return nil
		}
		_, err := w.Write(body)
		return err
	}
}

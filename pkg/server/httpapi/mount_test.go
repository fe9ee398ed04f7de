package httpapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// A mounted route gets the shared layer (authentication, method checks)
// and its refusals in the route's own envelope.
func TestMountedRouteSharesAuthAndUsesItsEnvelope(t *testing.T) {
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(&servertest.Engine{}, servertest.Renderer{})
	h := New(s, Options{APIKey: "k"})
	h.Mount("/v1/other", Route{
		Method: http.MethodPost,
		Serve: func(w http.ResponseWriter, r *http.Request, _ *server.RequestLog) error {
			var v map[string]any
			if err := DecodeJSON(w, r, &v); err != nil {
				return err
			}
			fmt.Fprint(w, "ok")
			return nil
		},
		WriteError: func(w http.ResponseWriter, err error) {
			e := Classify(err)
			w.WriteHeader(e.Status)
			fmt.Fprintf(w, "other:%s:%s", e.Type, e.Message)
		},
	})
	cases := []struct {
		name, key, method, body string
		status                  int
		prefix                  string
	}{
		{"served", "k", http.MethodPost, `{}`, 200, "ok"},
		{"no key", "", http.MethodPost, `{}`, 401, "other:authentication_error"},
		{"wrong method", "k", http.MethodGet, ``, 405, "other:invalid_request_error"},
		{"bad json", "k", http.MethodPost, `{`, 400, "other:invalid_request_error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, "/v1/other", strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			if c.key != "" {
				req.Header.Set("x-api-key", c.key)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != c.status || !strings.HasPrefix(rec.Body.String(), c.prefix) {
				t.Fatalf("got %d %q, want %d %q…", rec.Code, rec.Body.String(), c.status, c.prefix)
			}
		})
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/nope", nil)
	req.Header.Set("x-api-key", "k")
	h.ServeHTTP(rec, req)
	if !strings.Contains(rec.Body.String(), "/v1/other") {
		t.Fatalf("the 404 should list the mounted route to a client with the key: %s", rec.Body.String())
	}
}

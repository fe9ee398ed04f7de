package openai

import (
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
)

// host is s served as serve serves it, with the OpenAI routes mounted.
func host(s *server.Server) *httpapi.Host {
	h := httpapi.New(s, httpapi.Options{})
	New(s, Options{}).Mount(h)
	return h
}

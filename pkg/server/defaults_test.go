package server_test

import (
	"testing"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// serve --max-tokens is the max_tokens of a request that gives none and
// the most any request generates; the sampling defaults replace the
// model's in what adapters fill requests from (#44 S17).
func TestServerDefaultsCapMaxTokensAndSetSampling(t *testing.T) {
	temp, topK, topP, seed := 0.5, 7, 0.8, uint64(9)
	eng := &servertest.Engine{Script: script10}
	s := server.New(server.Config{Log: func(server.RequestLog) {}, Defaults: server.Defaults{
		MaxTokens: 3, Temperature: &temp, TopK: &topK, TopP: &topP, Seed: &seed}})
	s.SetEngine(eng, servertest.Renderer{})
	for _, tc := range []struct{ ask, want int }{{0, 3}, {100, 3}, {2, 2}} {
		res := runChat(t, s, &server.ChatRequest{Messages: userTurn("hi"), MaxTokens: tc.ask})
		gens := eng.Generations()
		if got := gens[len(gens)-1].MaxTokens; got != tc.want || res.Finish != "length" {
			t.Errorf("max_tokens %d: generated with MaxTokens %d (finish %s), want %d", tc.ask, got, res.Finish, tc.want)
		}
	}
	p := s.InfoFor("").Sampling
	if p.Temperature != temp || p.TopK != topK || p.TopP != topP || p.Seed != seed {
		t.Fatalf("sampling defaults %+v", p)
	}
	if s.DefaultMaxTokens() != 3 {
		t.Fatalf("DefaultMaxTokens %d", s.DefaultMaxTokens())
	}
}

func script10(string) []string { return []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} }

package server

import (
	"testing"
)

// The runtime engine reports its expert cache, whose counters grow with a
// generation, through the server's Activity (#39 item 6).
func TestRuntimeEngineReportsItsExpertCache(t *testing.T) {
	re := NewRuntimeEngine(tinyEngine(t), RuntimeOptions{ModelID: "tiny"})
	s := New(Config{Log: func(RequestLog) {}})
	s.SetEngine(re, PlainChatML{})
	before := s.Activity()
	if !before.HasExpert {
		t.Fatal("the tiny MoE model streams its experts through a cache, yet the engine reports none")
	}
	prompt, _ := re.Tokenize("The quick brown fox", 64)
	collect(t, re, prompt, 4)
	after := s.Activity()
	if after.Expert.Hits+after.Expert.Misses <= before.Expert.Hits+before.Expert.Misses {
		t.Errorf("a generation asked the expert cache for nothing: %+v → %+v", before.Expert, after.Expert)
	}
	if after.Expert.Misses > 0 && after.Expert.BytesRead == 0 {
		t.Errorf("misses without bytes read: %+v", after.Expert)
	}
	if after.Generating != 0 || after.Waiting != 0 {
		t.Errorf("an idle server reports %+v", after)
	}
}

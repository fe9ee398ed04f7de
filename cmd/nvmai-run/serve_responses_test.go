package main

import "testing"

// serve has --responses-keep; --scripted exists only in a test build
// (-tags nvmai_scripted), never in a release binary.
func TestServeFlagsForResponses(t *testing.T) {
	names := map[string]bool{}
	for _, f := range serveCommand().Flags {
		for _, n := range f.Names() {
			names[n] = true
		}
	}
	if !names["responses-keep"] {
		t.Fatal("serve lacks --responses-keep")
	}
	if names["scripted"] != (scriptedEngine != nil) {
		t.Fatalf("--scripted present %v, scripted engine built in %v", names["scripted"], scriptedEngine != nil)
	}
	for n, want := range map[int]int{0: -1, -3: -1, 1: 1, 64: 64} {
		if got := responsesKeep(n); got != want {
			t.Errorf("responsesKeep(%d) = %d, want %d", n, got, want)
		}
	}
}

package hf

import (
	"testing"
)

func TestQwen4ExpFixturesOpen(t *testing.T) {
	for _, name := range []string{"tiny-qwen38-perexpert", "tiny-qwen38-fused"} {
		s, err := Open("../../../shared/fixtures/dev/" + name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %s fused=%v %+v ngram=%+v", name, s.Architecture, s.FusedExperts, *s.Geometry.Qwen4Exp, s.NGram)
	}
}

package sample

import (
	"slices"
	"testing"
)

func TestTopKCandidates(t *testing.T) {
	ids, vals := TopKCandidates([]float32{1, 5, 3, 5, 3, 0}, 3)
	if !slices.Equal(ids, []int32{1, 2, 3, 4}) || !slices.Equal(vals, []float32{5, 3, 5, 3}) {
		t.Fatalf("got %v %v", ids, vals)
	}
}

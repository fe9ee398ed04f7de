package qwen35

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// TestThreadCountIsInvisible runs the same prompt and greedy decode with a
// 1-thread and a 3-thread pool (and no pool in the full set): logits must be
// bitwise equal.
func TestThreadCountIsInvisible(t *testing.T) {
	for _, fm := range fixtureModels {
		t.Run(fm.name, func(t *testing.T) {
			ref := loadRefs(t, filepath.Join(fixturesDir(t), fm.refs))[pick(0, 2)]
			var want []float32
			var wantGreedy []int
			for _, threads := range pick([]int{1, 3}, []int{0, 1, 3}) { // 0: nil pool
				var pool *kernels.Pool
				if threads > 0 {
					pool = kernels.NewPool(threads)
					defer pool.Close()
				}
				m, _ := fm.open(t, pool)
				logits, st := prefill(t, m, StateOptions{}, ref.IDs, []int{len(ref.IDs)})
				V := m.Config().VocabSize
				g := greedy(t, m, st, argmax(logits[len(logits)-V:]), pick(4, 16))
				if want == nil {
					want, wantGreedy = logits, g
					continue
				}
				if i := bitwiseDiff(logits, want); i >= 0 {
					t.Errorf("%d threads: logit %d = %v, first run %v", threads, i, logits[i], want[i])
				}
				if !slices.Equal(g, wantGreedy) {
					t.Errorf("%d threads: greedy %v, first run %v", threads, g, wantGreedy)
				}
			}
		})
	}
}

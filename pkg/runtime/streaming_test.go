package runtime

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/nvmai/nvmai/pkg/expertcache"
)

// logitsOf runs a greedy generation and returns every row of logits.
func logitsOf(t *testing.T, dir string, opt Options, prompt []int, tokens, chunk int) [][]float32 {
	t.Helper()
	e, err := Load(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var rows [][]float32
	_, err = e.NewSession(SessionOptions{}).Generate(context.Background(), prompt, GenerateOptions{
		MaxTokens: tokens, IgnoreEOS: true, PrefillChunk: chunk,
		OnLogits: func(r []float32) error { rows = append(rows, append([]float32(nil), r...)); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func sameBits(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		for j := range a[i] {
			if a[i][j] != b[i][j] && !(a[i][j] != a[i][j] && b[i][j] != b[i][j]) {
				return false
			}
		}
	}
	return true
}

// Logits are bitwise identical whatever the expert cache does: one slot per
// layer beyond top-k (constant eviction), every expert cached, bounded or
// buffered reads, any number of readers, any prefill chunking, experts
// guessed and read ahead in decode or not.
func TestExpertStreamingIsBitwiseInvisible(t *testing.T) {
	refs := loadRefs(t, "tiny-moe.refs.json")
	prompt, widths := refs[len(refs)-1].IDs, []int{4, 16}
	if testing.Short() || raceEnabled {
		// The cache and its readers race the same way at either width;
		// scripts/test.sh runs both widths and the whole prompt without the
		// detector.
		prompt, widths = prompt[:120], widths[:1]
	}
	for _, bits := range widths {
		dir := install(t, "tiny-moe-fused", bits)
		want := logitsOf(t, dir, Options{Threads: 2, Experts: ExpertOptions{Slots: 16}}, prompt, 12, 256)
		for _, tc := range []struct {
			name     string
			opt      Options
			buffered bool
			chunk    int
		}{
			{"one slot beyond top-k", Options{Threads: 2, Experts: ExpertOptions{Slots: 5}}, false, 256},
			{"top-k slots, 1 reader", Options{Threads: 1, Experts: ExpertOptions{Slots: 4, IOThreads: 1}}, false, 256},
			{"buffered reads", Options{Threads: 2, Experts: ExpertOptions{Slots: 5}}, true, 256},
			{"8 readers, 3 threads", Options{Threads: 3, Experts: ExpertOptions{Slots: 7, IOThreads: 8}}, false, 256},
			{"token-by-token prefill", Options{Threads: 2, Experts: ExpertOptions{Slots: 16}}, false, 1},
			{"prefill chunks of 7", Options{Threads: 2, Experts: ExpertOptions{Slots: 6}}, false, 7},
			{"guessing 4 ahead, token by token", Options{Threads: 2, Experts: ExpertOptions{Slots: 8, Prefetch: 4}}, false, 1},
			{"guessing 1 ahead, 1 reader", Options{Threads: 1, Experts: ExpertOptions{Slots: 9, IOThreads: 1, Prefetch: 1}}, false, 256},
			{"guessing 4 ahead, buffered reads", Options{Threads: 2, Experts: ExpertOptions{Slots: 10, Prefetch: 4}}, true, 256},
		} {
			t.Run(fmt.Sprintf("%dbit/%s", bits, tc.name), func(t *testing.T) {
				if tc.buffered {
					t.Setenv(expertcache.BoundedIOEnv, "0")
				} else {
					os.Unsetenv(expertcache.BoundedIOEnv)
				}
				if got := logitsOf(t, dir, tc.opt, prompt, 12, tc.chunk); !sameBits(got, want) {
					t.Error("logits differ from the all-cached run")
				}
			})
		}
	}
}

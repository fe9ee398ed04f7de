package runtime

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestSumSpans: every whole word of every span is summed exactly once,
// however the bytes are cut between goroutines.
func TestSumSpans(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, lens := range [][]int{{8}, {4096, 100, 8, 0, 24}, {7, 15, 64}, {1 << 16, 3 << 12, 40}} {
		spans := make([][]byte, len(lens))
		var want uint64
		total := 0
		for i, n := range lens {
			spans[i] = make([]byte, n)
			for j := range spans[i] {
				spans[i][j] = byte(rng.Uint32())
			}
			for j := 0; j+8 <= n; j += 8 {
				want += binary.LittleEndian.Uint64(spans[i][j:])
			}
			total += n &^ 7
		}
		for threads := 1; threads <= 5; threads++ {
			t.Run(fmt.Sprint(lens, threads), func(t *testing.T) {
				if got := sumSpans(spans, total, threads); got != want {
					t.Fatalf("sum %d, want %d", got, want)
				}
			})
		}
	}
}

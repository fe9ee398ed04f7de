//go:build !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkPrefetchDistance times the out-of-cache Q4/Q8 MatVecFast with
// several prefetch distances, alternating them repetition by repetition,
// and reports each one's median GB/s.
func BenchmarkPrefetchDistance(b *testing.B) {
	distances := []int{0, 1024, 4096, 8192, 16384, 24576, 32768}
	defer func(saved int) { prefetchBytes = saved }(prefetchBytes)
	for _, enc := range quantEncodings {
		rng := rand.New(rand.NewPCG(7, 8))
		m := rawQMatrix(rng, enc, 16384, 8192, codesRandom)
		x := randomVector(rng, m.Cols)
		dst := make([]float32, m.Rows)
		b.Run(enc.String(), func(b *testing.B) {
			rates := make([][]float64, len(distances))
			for b.Loop() {
				for i, d := range distances {
					prefetchBytes = d
					t0 := time.Now()
					MatVecFast(dst, m, x)
					rates[i] = append(rates[i], float64(weightBytes(m))/time.Since(t0).Seconds()/1e9)
				}
			}
			for i, d := range distances {
				b.ReportMetric(median(rates[i]), fmt.Sprintf("GB/s@%d", d))
			}
		})
	}
}

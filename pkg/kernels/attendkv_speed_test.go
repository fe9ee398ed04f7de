package kernels

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestAttendKVSpeed times one KV head's decode attention (8 query heads of
// 256 in a 512-wide KV row, the 35B-A3B group) over n cached positions with
// float32, bfloat16 and int8 rows, the widths' calls interleaved round by
// round so a noisy machine slows all alike, and prints each width's fastest
// and median round. Only with NVMAI_KV_SPEED=1 (scripts/kv-bench.sh);
// NVMAI_KV_SPEED_ROUNDS sets the rounds (default 9).
func TestAttendKVSpeed(t *testing.T) {
	if os.Getenv("NVMAI_KV_SPEED") == "" {
		t.Skip("set NVMAI_KV_SPEED=1 to time the attention kernels")
	}
	rounds := 9
	if v, err := strconv.Atoi(os.Getenv("NVMAI_KV_SPEED_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	const heads, d, kvd = 8, 256, 512
	for _, n := range []int{4096, 32768, 131072} {
		rng := rand.New(rand.NewPCG(1, 2))
		q, kf, vf := randomVector(rng, heads*d), randomVector(rng, n*kvd), randomVector(rng, n*kvd)
		scores, qi, o := make([]float32, heads*n), make([]float32, heads*d), make([]float32, heads*d)
		scratch := make([]float32, AttendScratch(heads, d))
		kq, vq := q8Cache(kf, kvd, 64), q8Cache(vf, kvd, 64)
		kb, vb := make([]uint16, len(kf)), make([]uint16, len(vf))
		ToBF16(kb, kf)
		ToBF16(vb, vf)
		widths := []struct {
			name string
			run  func()
		}{
			{"f32", func() { AttendScores(scores, q, d, kf, kvd, n, 0.0625, qi); AttendValues(o, scores, d, vf, kvd, n) }},
			{"bf16", func() {
				AttendScoresBF16(scores, q, d, BF16Rows{kb, kvd}, n, 0.0625, qi, scratch)
				AttendValuesBF16(o, scores, d, BF16Rows{vb, kvd}, n, scratch)
			}},
			{"q8", func() {
				AttendScoresQ8(scores, q, d, kq, n, 0.0625, qi, scratch)
				AttendValuesQ8(o, scores, d, vq, n, scratch)
			}},
		}
		times := make([][]time.Duration, len(widths))
		for range rounds {
			for i, w := range widths {
				start := time.Now()
				w.run()
				times[i] = append(times[i], time.Since(start))
			}
		}
		line := fmt.Sprintf("n=%-6d", n)
		for i, w := range widths {
			slices.Sort(times[i])
			line += fmt.Sprintf("  %s min %7.2f ms median %7.2f ms", w.name, ms(times[i][0]), ms(times[i][len(times[i])/2]))
		}
		fmt.Println(line)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

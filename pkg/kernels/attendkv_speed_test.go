package kernels

import (
	"fmt"
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
	for _, n := range []int{4096, 32768, 131072} {
		widths := kvWidthRuns(n)
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

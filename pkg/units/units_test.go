package units

import (
	"math"
	"testing"
)

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1 KiB"}, {1536, "1.5 KiB"}, {512 << 10, "512 KiB"},
		{2936012, "2.8 MiB"}, {3 << 30, "3 GiB"}, {20083691929, "18.7 GiB"}, {-2048, "-2 KiB"},
		{math.MaxInt64, "8.0 EiB"}, {math.MinInt64, "-8 EiB"},
	} {
		if got := Bytes(tc.n); got != tc.want {
			t.Errorf("Bytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestRate(t *testing.T) {
	for _, tc := range []struct {
		r    float64
		want string
	}{{3.3e9, "3.1 GiB/s"}, {0, "0 B/s"}, {-1, "-"}, {math.NaN(), "-"}, {379584512, "362 MiB/s"}} {
		if got := Rate(tc.r); got != tc.want {
			t.Errorf("Rate(%g) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

package expertcache

import (
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		err  string
	}{
		{"8G", 8 * GiB, ""},
		{"8g", 8 * GiB, ""},
		{"8GiB", 8 * GiB, ""},
		{"8 GiB", 8 * GiB, ""},
		{" 512M ", 512 * MiB, ""},
		{"1.5G", 3 * GiB / 2, ""},
		{"0.5K", 512, ""},
		{"123456", 123456, ""},
		{"123456B", 123456, ""},
		{"2T", 2 * TiB, ""},
		{"1.0000000001K", 1024, ""}, // rounds down to whole bytes
		{"0", 0, ""},
		{"1024T", 1 << 50, ""},
		{"", 0, "empty size"},
		{"G", 0, "non-negative decimal"},
		{"-1G", 0, "non-negative decimal"},
		{"1.", 0, "non-negative decimal"},
		{".5G", 0, "non-negative decimal"},
		{"1.2.3G", 0, "non-negative decimal"},
		{"1.5", 0, "fraction of a byte"},
		{"8GB", 0, "ambiguous"},
		{"8MB", 0, "ambiguous"},
		{"8X", 0, "unknown unit"},
		{"8 G G", 0, "unknown unit"},
		{"1e9", 0, "unknown unit"},
		{"2000000T", 0, "exceeds the largest"},
		{strings.Repeat("9", 100), 0, "longer than"},
	}
	for _, tc := range cases {
		got, err := ParseSize(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSize(%q) = %d, %v; want an error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"8G", "1.5G", "512M", "123456", "8GB", "0.001T", " 7 kib "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 || n > maxSize {
			t.Fatalf("ParseSize(%q) = %d outside [0, %d]", s, n, int64(maxSize))
		}
		// What we print for people parses back to at least the value.
		back, err := ParseSize(sizeFlagCeil(n))
		if err != nil || back < n {
			t.Fatalf("sizeFlagCeil(%d) = %q parses to %d, %v", n, sizeFlagCeil(n), back, err)
		}
	})
}

func TestFormatSize(t *testing.T) {
	cases := map[int64]string{0: "0 B", 512: "512 B", 8 * GiB: "8 GiB", 1769472: "1.69 MiB", 1536 * MiB: "1.50 GiB"}
	for n, want := range cases {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
	ceil := map[int64]string{566231040: "540M", 8 * GiB: "8G", 8*GiB + 1: "8.01G", 1769472: "1.69M", 1000: "1000"}
	for n, want := range ceil {
		if got := sizeFlagCeil(n); got != want {
			t.Errorf("sizeFlagCeil(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestDefaultBudget(t *testing.T) {
	cases := []struct {
		bits int
		ram  int64
		want int64
	}{
		{4, 64 * GiB, 8 * GiB},
		{8, 64 * GiB, 8 * GiB},
		{16, 64 * GiB, 8 * GiB},
		{4, 16 * GiB, 8 * GiB},
		{4, 12 * GiB, 6 * GiB}, // half of a small machine
		{8, 24 * GiB, 8 * GiB},
		{4, 0, 8 * GiB}, // unknown RAM
	}
	for _, tc := range cases {
		if got := DefaultBudget(tc.bits, tc.ram); got != tc.want {
			t.Errorf("DefaultBudget(%d, %s) = %s, want %s", tc.bits, FormatSize(tc.ram), FormatSize(got), FormatSize(tc.want))
		}
	}
}

// The 35B-A3B strides (docs/format.md, nvmai-reference §2.4) with 40
// layers. NVMAI reports 128 slots at 4-bit for 8 GiB because it snaps to its
// allowed set {8,…,96,128}; 128 × 67.5 MiB is 8.44 GiB, over the budget.
// We round down so the budget is a ceiling: 121 slots (7.98 GiB). At 8-bit
// both rules give 64.
func TestSlotsFor35BGeometry(t *testing.T) {
	cases := []struct {
		name   string
		stride int64
		budget int64
		want   int
	}{
		{"4-bit 8 GiB", 1_769_472, 8 * GiB, 121},
		{"8-bit 8 GiB", 3_342_336, 8 * GiB, 64},
		{"4-bit 8.4375 GiB (NVMAI's 128 slots)", 1_769_472, 128 * 40 * 1_769_472, 128},
		{"4-bit one byte short of 128 slots", 1_769_472, 128*40*1_769_472 - 1, 127},
		{"8-bit 2 GiB", 3_342_336, 2 * GiB, 16},
	}
	for _, tc := range cases {
		got := SlotsForBudget(tc.budget, tc.stride, 40)
		if got != tc.want {
			t.Errorf("%s: %d slots, want %d", tc.name, got, tc.want)
		}
		if int64(got)*tc.stride*40 > tc.budget {
			t.Errorf("%s: %d slots exceed the budget", tc.name, got)
		}
	}
}

func TestBudgetErrors(t *testing.T) {
	m := &packexperts.Manifest{Bits: 4, Experts: &packexperts.Experts{Count: 256, TopK: 8, Stride: 1_769_472, Layers: make([]packexperts.ExpertLayer, 40)}}
	cases := []struct {
		opt   Options
		slots int
		err   string
	}{
		{Options{Budget: 8 * GiB}, 121, ""},
		{Options{Budget: 8 * GiB, Slots: 16}, 16, ""},
		{Options{Budget: 1000 * GiB}, 256, ""}, // capped at the experts per layer
		{Options{Slots: 300}, 256, ""},
		{Options{Budget: 8 * 40 * 1_769_472}, 8, ""},
		{Options{Budget: 8*40*1_769_472 - 1}, 0, "the minimum budget is 540M (566231040 bytes)"},
		{Options{Budget: 100 * MiB}, 0, "expert cache budget 100 MiB buys 1 slots per layer"},
		{Options{Slots: 7}, 0, "use at least 8 slots (a budget of 540M)"},
		{Options{Slots: -1}, 0, "must be positive"},
		{Options{Budget: -5}, 0, "negative"},
	}
	for _, tc := range cases {
		got, err := slotsPerLayer(tc.opt, m)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: %d, %v; want an error containing %q", tc.opt, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.slots {
			t.Errorf("%+v: %d, %v; want %d slots", tc.opt, got, err, tc.slots)
		}
	}
}

func TestParseKBField(t *testing.T) {
	meminfo := "MemTotal:       24567896 kB\nMemFree:        22000000 kB\n"
	status := "Name:\tgo\nVmPeak:\t  100 kB\nVmHWM:\t    2048 kB\nVmRSS:\t1024 kB\n"
	cases := []struct {
		text, key string
		want      int64
		err       string
	}{
		{meminfo, "MemTotal", 24567896 * KiB, ""},
		{status, "VmHWM", 2 * MiB, ""},
		{status, "VmRSS", MiB, ""},
		{status, "VmSwap", 0, "no VmSwap line"},
		{"VmHWM: 12 MB\n", "VmHWM", 0, "not \"<n> kB\""},
		{"VmHWM: -12 kB\n", "VmHWM", 0, "not a size"},
		{"VmHWM: 99999999999999999999 kB\n", "VmHWM", 0, "not a size"},
	}
	for _, tc := range cases {
		got, err := parseKBField(tc.text, tc.key)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseKBField(%q, %s) = %d, %v; want error %q", tc.text, tc.key, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseKBField(%q, %s) = %d, %v; want %d", tc.text, tc.key, got, err, tc.want)
		}
	}
	if n, err := MemTotal(); err != nil || n <= 0 {
		t.Errorf("MemTotal() = %d, %v", n, err)
	}
	if n, err := PeakRSS(); err != nil || n <= 0 {
		t.Errorf("PeakRSS() = %d, %v", n, err)
	}
}

func FuzzParseKBField(f *testing.F) {
	f.Add("MemTotal:       24567896 kB\n", "MemTotal")
	f.Add("VmHWM:\t2048 kB\nVmRSS:\t1 kB", "VmRSS")
	f.Add("x:1 kB", "x")
	f.Fuzz(func(t *testing.T, text, key string) {
		n, err := parseKBField(text, key)
		if err == nil && (n < 0 || n > maxSize) {
			t.Fatalf("parseKBField gave %d", n)
		}
	})
}

func TestBoundedIOFromEnv(t *testing.T) {
	cases := []struct {
		val  string
		want IOMode
		err  bool
	}{
		{"0", IOBuffered, false},
		{"off", IOBuffered, false},
		{"1", IOBounded, false},
		{"", IOBounded, false},
		{"TRUE", IOBounded, false},
		{"maybe", IOBounded, true},
	}
	for _, tc := range cases {
		t.Setenv(BoundedIOEnv, tc.val)
		got, err := BoundedIOFromEnv()
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s=%q: %v, %v", BoundedIOEnv, tc.val, got, err)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	for _, p := range []Policy{PolicyDefault, PolicyLRU, PolicyLFU, PolicyAgingLFU, PolicyLRFU, PolicyAdaptive} {
		got, err := ParsePolicy(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := ParsePolicy("fifo"); err == nil {
		t.Error("ParsePolicy(fifo) accepted")
	}
}

package expertcache

import (
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"strconv"
	"strings"
)

// Binary size units. ParseSize reads K, M, G and T as these (G = GiB).
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40
)

// DefaultBudgetBytes is NVMAI's default expert budget for its 4- and 8-bit
// installs of Qwen3.5/3.6-35B-A3B (docs/nvmai-reference.md §1.4, §6.3).
const DefaultBudgetBytes = 8 * GiB

// maxSize bounds ParseSize: one EiB is far beyond any machine's RAM, and
// keeping well below MaxInt64 leaves room for the slot arithmetic.
const maxSize = 1 << 60

// maxSizeText bounds the text ParseSize looks at, so a hostile flag value
// cannot make the exact decimal arithmetic expensive.
const maxSizeText = 64

// DefaultBudget is the expert budget used when none is given: 8 GiB (what
// NVMAI uses for both its 4- and 8-bit installs), but never more than half
// of totalRAM so the OS, the resident weights and the KV cache keep room.
// totalRAM ≤ 0 means unknown and leaves 8 GiB. Every width gets the same
// default today (NVMAI has no 16-bit installs); bits is taken so per-width
// defaults, which NVMAI v5.1 introduced per model family, change no caller.
func DefaultBudget(bits int, totalRAM int64) int64 {
	_ = bits
	budget := DefaultBudgetBytes
	if totalRAM > 0 && budget > totalRAM/2 {
		budget = totalRAM / 2
	}
	return budget
}

// SlotsForBudget is how many slots per layer budget buys: the floor of
// budget / (stride × layers), so slots × stride × layers never exceeds the
// budget. NVMAI instead snaps to the nearest of {8,16,24,32,64,96,128},
// which can overshoot (8 GiB at 4-bit gives it 128 slots = 8.44 GiB); here
// 8 GiB gives 121 slots at 4-bit and 64 at 8-bit for the 35B geometry.
func SlotsForBudget(budget, stride int64, layers int) int {
	if budget <= 0 || stride <= 0 || layers <= 0 {
		return 0
	}
	perSlot := stride * int64(layers)
	if perSlot/int64(layers) != stride {
		return 0
	}
	return int(min(budget/perSlot, math.MaxInt32))
}

// MinBudget is the smallest budget that holds topK experts per layer, the
// experts one token routes to.
func MinBudget(stride int64, layers, topK int) int64 {
	return stride * int64(layers) * int64(topK)
}

// ParseSize reads a size such as "8G", "512M", "1.5G", "8GiB" or "123456"
// (bytes). Units are binary and case-insensitive: K = KiB = 2^10, M = MiB =
// 2^20, G = GiB = 2^30, T = TiB = 2^40; "B" alone means bytes. Decimal-unit
// spellings (KB, MB, GB, TB) are refused rather than guessed at. Fractions
// are allowed with a unit and round down to whole bytes.
func ParseSize(s string) (int64, error) {
	text := strings.TrimSpace(s)
	if text == "" {
		return 0, fmt.Errorf("empty size; write bytes or a number with K, M, G or T (binary units), e.g. 8G")
	}
	if len(text) > maxSizeText {
		return 0, fmt.Errorf("size %.20q… is longer than %d characters", text, maxSizeText)
	}
	num, unit := splitNumber(text)
	if !validDecimal(num) {
		return 0, fmt.Errorf("size %q does not start with a non-negative decimal number", s)
	}
	mult, err := unitMultiplier(strings.TrimSpace(unit))
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	if strings.Contains(num, ".") && mult == 1 {
		return 0, fmt.Errorf("size %q: a fraction of a byte; add a unit (K, M, G, T) or write whole bytes", s)
	}
	value, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("size %q: %q is not a number", s, num)
	}
	value.Mul(value, new(big.Rat).SetInt64(mult))
	bytes := new(big.Int).Quo(value.Num(), value.Denom())
	if !bytes.IsInt64() || bytes.Int64() > maxSize {
		return 0, fmt.Errorf("size %q exceeds the largest accepted size, %s", s, FormatSize(maxSize))
	}
	return bytes.Int64(), nil
}

// splitNumber splits "1.5 G" into "1.5" and " G".
func splitNumber(s string) (num, unit string) {
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	return s[:i], s[i:]
}

func validDecimal(num string) bool {
	whole, frac, hasDot := strings.Cut(num, ".")
	if whole == "" || strings.Contains(frac, ".") || (hasDot && frac == "") {
		return false
	}
	return true
}

func unitMultiplier(unit string) (int64, error) {
	switch strings.ToLower(unit) {
	case "", "b":
		return 1, nil
	case "k", "kib":
		return KiB, nil
	case "m", "mib":
		return MiB, nil
	case "g", "gib":
		return GiB, nil
	case "t", "tib":
		return TiB, nil
	case "kb", "mb", "gb", "tb":
		return 0, fmt.Errorf("unit %q is ambiguous; sizes are binary, write %s or %siB", unit, unit[:1], unit[:1])
	}
	return 0, fmt.Errorf("unknown unit %q; use K, M, G or T (binary: G = GiB = 2^30 bytes)", unit)
}

// FormatSize renders n bytes for people: "8 GiB", "1.69 MiB", "512 B".
func FormatSize(n int64) string {
	unit, name := unitFor(n)
	if unit == 1 {
		return strconv.FormatInt(n, 10) + " B"
	}
	if n%unit == 0 {
		return fmt.Sprintf("%d %s", n/unit, name)
	}
	return fmt.Sprintf("%.2f %s", float64(n)/float64(unit), name)
}

// sizeFlagCeil renders n in ParseSize's syntax, rounded up to two decimals
// of the largest fitting unit, so pasting it back always gives ≥ n bytes.
func sizeFlagCeil(n int64) string {
	unit, name := unitFor(n)
	if unit == 1 {
		return strconv.FormatInt(n, 10)
	}
	hundredths := (n*100 + unit - 1) / unit
	if n > math.MaxInt64/100 {
		hundredths = n/unit*100 + 100
	}
	whole, frac := hundredths/100, hundredths%100
	letter := name[:1]
	switch {
	case frac == 0:
		return fmt.Sprintf("%d%s", whole, letter)
	case frac%10 == 0:
		return fmt.Sprintf("%d.%d%s", whole, frac/10, letter)
	}
	return fmt.Sprintf("%d.%02d%s", whole, frac, letter)
}

func unitFor(n int64) (int64, string) {
	switch {
	case n >= TiB:
		return TiB, "TiB"
	case n >= GiB:
		return GiB, "GiB"
	case n >= MiB:
		return MiB, "MiB"
	case n >= KiB:
		return KiB, "KiB"
	}
	return 1, "B"
}

// MemTotal is the machine's RAM from /proc/meminfo (MemTotal).
func MemTotal() (int64, error) {
	return procField("/proc/meminfo", "MemTotal")
}

// PeakRSS is this process's peak resident set (VmHWM in /proc/self/status).
func PeakRSS() (int64, error) {
	return procField("/proc/self/status", "VmHWM")
}

// CurrentRSS is this process's resident set now (VmRSS).
func CurrentRSS() (int64, error) {
	return procField("/proc/self/status", "VmRSS")
}

// procFileLimit bounds how much of a /proc file we read; meminfo and status
// are a few KiB.
const procFileLimit = 1 << 20

func procField(path, key string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	text, err := io.ReadAll(io.LimitReader(f, procFileLimit))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	v, err := parseKBField(string(text), key)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// parseKBField finds "key:   123 kB" in a /proc text and returns bytes.
func parseKBField(text, key string) (int64, error) {
	for line := range strings.Lines(text) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || name != key {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("%s line %q is not \"<n> kB\"", key, strings.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb < 0 || kb > maxSize/KiB {
			return 0, fmt.Errorf("%s value %q is not a size in kB", key, fields[0])
		}
		return kb * KiB, nil
	}
	return 0, fmt.Errorf("no %s line", key)
}

// Package units formats sizes and rates for people, in binary units, the
// same way in every layer: progress bars, summaries, errors, bench reports.
package units

import "fmt"

// Bytes formats n with the largest binary unit that keeps the number at 1
// or more, so small sizes keep their precision: "512 B", "512 KiB",
// "2.8 MiB", "18.7 GiB". Exact multiples print without a fraction.
func Bytes(n int64) string {
	const unit = 1024
	sign := ""
	u := uint64(n)
	if n < 0 {
		sign, u = "-", uint64(-n)
	}
	if u < unit {
		return fmt.Sprintf("%s%d B", sign, u)
	}
	div, exp := uint64(unit), 0
	for m := u / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	if u%div == 0 {
		return fmt.Sprintf("%s%d %ciB", sign, u/div, "KMGTPE"[exp])
	}
	return fmt.Sprintf("%s%.1f %ciB", sign, float64(u)/float64(div), "KMGTPE"[exp])
}

// Rate formats bytes per second in the same units: "362.0 MiB/s",
// "3.1 GiB/s"; "-" when nothing was measured (negative or NaN).
func Rate(bytesPerSecond float64) string {
	if bytesPerSecond != bytesPerSecond || bytesPerSecond < 0 {
		return "-"
	}
	return Bytes(int64(bytesPerSecond)) + "/s"
}

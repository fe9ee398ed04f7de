package cliutil

import "fmt"

// Bytes formats n with binary units and the unit chosen so that small sizes
// keep their precision: "512 B", "2.8 MiB", "18.7 GiB". Every size a
// command prints (progress, summaries, bench) goes through it or Rate.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	neg := n < 0
	u := uint64(n)
	if neg {
		u = uint64(-n)
	}
	div, exp := uint64(unit), 0
	for m := u / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	sign := ""
	if neg {
		sign = "-"
	}
	return fmt.Sprintf("%s%.1f %ciB", sign, float64(u)/float64(div), "KMGTPE"[exp])
}

// HumanBytes is Bytes (the older name).
func HumanBytes(n int64) string { return Bytes(n) }

// Rate formats a transfer or read rate in the same binary units: "362.0 MiB/s",
// "3.1 GiB/s".
func Rate(bytesPerSecond float64) string {
	if bytesPerSecond != bytesPerSecond || bytesPerSecond < 0 { // NaN or negative: nothing measured
		return "-"
	}
	return Bytes(int64(bytesPerSecond)) + "/s"
}

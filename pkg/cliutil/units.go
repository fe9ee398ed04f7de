package cliutil

import "github.com/nvmai/nvmai/pkg/units"

// Bytes is units.Bytes: every size a command prints goes through it.
func Bytes(n int64) string { return units.Bytes(n) }

// HumanBytes is Bytes (the older name).
func HumanBytes(n int64) string { return units.Bytes(n) }

// Rate is units.Rate: every read or transfer rate a command prints.
func Rate(bytesPerSecond float64) string { return units.Rate(bytesPerSecond) }

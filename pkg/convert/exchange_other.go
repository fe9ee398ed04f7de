//go:build !linux

package convert

// exchange has no atomic form here: publish falls back to two renames.
func exchange(a, b string) error { return errExchangeUnsupported }

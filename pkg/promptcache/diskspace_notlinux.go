//go:build !linux

package promptcache

// virtualFS knows no virtual filesystems outside Linux.
func virtualFS(string) string { return "" }

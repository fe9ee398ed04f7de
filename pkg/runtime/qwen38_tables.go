package runtime

import (
	"io"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/models/qwen38"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// NgramTables is a qwen4_exp install's n-gram tables as the CPU engine
// reads them: rows per pass through the bounded reader, with read ahead
// (qwen38.NgramPrefetcher).
type NgramTables interface {
	qwen38.NgramTable
	qwen38.NgramPrefetcher
	io.Closer
}

// OpenNgramTables opens the n-gram tables of the qwen4_exp install at dir
// for an engine that opens no expert cache (the GPU engine): the read mode
// NVMAI_BOUNDED_IO selects (bounded by default, probed per file as the
// expert cache probes), the expert cache's default reader count. The
// tables stay on disk; the reader's buffers are what ngramBufferBytes
// counts.
func OpenNgramTables(dir string, man *packexperts.Manifest, cfg qwen38.Config) (NgramTables, error) {
	mode, err := expertcache.BoundedIOFromEnv()
	if err != nil {
		return nil, err
	}
	return openNgramTables(dir, man, cfg, mode, 0)
}

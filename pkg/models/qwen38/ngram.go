package qwen38

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/ngramhash"
)

// NgramTable gives rows of a PLE layer's hashed n-gram table
// (ngram_embedding.weight [R_tab, dr], the checkpoint's shards concatenated
// in order). Row ids depend only on token ids, so the model announces the
// rows of a whole chunk before its first layer runs (NgramPrefetcher) and
// reads them when the PLE layer runs; an implementation backed by a file
// can start reading them as soon as it is told.
type NgramTable interface {
	// Rows writes the rows of ids (global row ids) into dst, dr floats
	// each, in the order of ids.
	Rows(ple int, ids []int64, dst []float32) error
}

// NgramPrefetcher is implemented by tables that can start reading rows
// before they are asked for. Prefetch must not wait for I/O and must not
// change what Rows returns.
type NgramPrefetcher interface {
	Prefetch(ple int, ids []int64)
}

// ngramConsts are one PLE layer's hashing constants (§3.4): the layer
// multipliers m [N], the head primes P [NH] and offsets O [NH].
type ngramConsts struct {
	mult    []int64
	primes  []int64
	offsets []int64
	rows    int64 // R_tab: the table's row count, padded
}

// newNgramConsts is the k-th PLE layer's constants (pkg/ngramhash holds the
// formula the converter checks checkpoints with).
func newNgramConsts(c Config, k int) ngramConsts {
	h := ngramhash.Layer(ngramhash.Params{Seed: c.Seed, Vocab: c.VocabSize, NGramSize: c.NgramSize, Heads: c.NgramHeads(),
		VocabBase: c.NgramVocabBase, Divisor: c.NgramRowsDivide}, k)
	return ngramConsts{mult: h.Multipliers, primes: h.Primes, offsets: h.Offsets, rows: h.Rows}
}

// check compares the constants a checkpoint stores with the recomputation.
func (nc ngramConsts) check(name string, got []int64, want []int64) error {
	if len(got) != len(want) {
		return fmt.Errorf("qwen38: tensor %s has %d values, the config gives %d", name, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("qwen38: tensor %s[%d] = %d, the config's formula gives %d; the checkpoint does not match its config (vocab_size, seed or ple_layer_ids)", name, i, got[i], want[i])
		}
	}
	return nil
}

// ngramHistory is the n-gram context of a sequence: its last N−1 token ids,
// oldest first; a fresh sequence holds N−1 EOS.
type ngramHistory []int

func newNgramHistory(c Config) ngramHistory {
	h := make(ngramHistory, c.NgramSize-1)
	for i := range h {
		h[i] = c.EOS
	}
	return h
}

// rowIDs appends the NH global row ids of token id after history h, and
// pushes id onto h. The context c_s is t_{p−s} unless one of t_{p−s} …
// t_{p−1} is EOS, then EOS (the reset of §3.4).
func (nc *ngramConsts) rowIDs(dst []int64, h ngramHistory, id, eos, headsPerNgram int) []int64 {
	mix := int64(id) * nc.mult[0]
	ctx := h[len(h)-1]
	for n := 2; n <= len(nc.mult); n++ {
		s := n - 1 // the context position this order adds
		if s > 1 && ctx != eos {
			ctx = h[len(h)-s]
		}
		// once the context passed an EOS it stays EOS: ctx is then eos
		mix ^= int64(ctx) * nc.mult[s]
		for j := (n - 2) * headsPerNgram; j < (n-1)*headsPerNgram; j++ {
			dst = append(dst, mix%nc.primes[j]+nc.offsets[j])
		}
	}
	copy(h, h[1:])
	h[len(h)-1] = id
	return dst
}

package qwen38

import (
	"fmt"
	"math"
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

const (
	golden = 0x9E3779B97F4A7C15
	int63  = math.MaxInt64
)

func splitmix64(v uint64) uint64 {
	v += golden
	v = (v ^ v>>30) * 0xBF58476D1CE4E5B9
	v = (v ^ v>>27) * 0x94D049BB133111EB
	return v ^ v>>31
}

// newNgramConsts recomputes transformers' _build_layer_multipliers and
// _find_nth_prime_after for the k-th PLE layer.
func newNgramConsts(c Config, k int) ngramConsts {
	N, NH := c.NgramSize, c.NgramHeads()
	half := max(1, int64(int63)/int64(c.VocabSize)/2)
	base := uint64(c.Seed + 10007*int64(k))
	nc := ngramConsts{mult: make([]int64, N), primes: make([]int64, NH), offsets: make([]int64, NH)}
	for i := range N {
		v := splitmix64(base + golden*uint64(i+1))
		nc.mult[i] = 2*int64(v%uint64(half)) + 1
	}
	p := c.NgramVocabBase - 1
	for range k * NH {
		p = nextPrime(p)
	}
	var total int64
	for j := range NH {
		p = nextPrime(p)
		nc.primes[j], nc.offsets[j] = p, total
		total += p
	}
	d := c.NgramRowsDivide
	nc.rows = (total + d - 1) / d * d
	return nc
}

// nextPrime is the smallest prime above p, by trial division.
func nextPrime(p int64) int64 {
	for q := p + 1; ; q++ {
		if isPrime(q) {
			return q
		}
	}
}

func isPrime(q int64) bool {
	if q < 2 {
		return false
	}
	for d := int64(2); d*d <= q; d++ {
		if q%d == 0 {
			return false
		}
	}
	return true
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

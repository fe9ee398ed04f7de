// Package ngramhash computes the hashing constants of Qwen3.8-Flash-Next's
// hashed n-gram (PLE) layer exactly as transformers 5.17 builds them
// (_build_layer_multipliers, _find_nth_prime_after; docs/qwen38.md), so that
// the converter, which checks a checkpoint's I64 buffers against them, and
// the runtime, which hashes with them, share one formula.
package ngramhash

// Params are the config values the constants depend on.
type Params struct {
	Seed      int64 // seed
	Vocab     int   // vocab_size
	NGramSize int   // ngram_size (N)
	Heads     int   // n-gram heads NH = (N − 1) · heads_per_ngram
	VocabBase int64 // ngram_vocab_size_base: the primes start there
	Divisor   int64 // make_ngram_vocab_size_divisible_by
}

// Constants are one PLE layer's constants.
type Constants struct {
	Multipliers []int64 // layer_multipliers [N]
	Primes      []int64 // ngram_heads_vocab_sizes [NH]
	Offsets     []int64 // ngram_heads_offsets [NH]: Σ of the primes before
	Rows        int64   // the table's rows: Σ primes rounded up to Divisor
}

// Gamma is splitmix64's increment.
const Gamma = 0x9E3779B97F4A7C15

// layerSeedStep separates the PLE layers' seeds.
const layerSeedStep = 10007

// Layer returns the constants of the k-th PLE layer (its rank in the sorted
// ple_layer_ids). The caller bounds p (the prime search is trial division
// and runs over (k+1)·Heads primes from VocabBase); Vocab and Divisor must
// be positive.
func Layer(p Params, k int) Constants {
	var c Constants
	half := uint64(max(1, int64(^uint64(0)>>1)/int64(p.Vocab)/2))
	base := uint64(p.Seed) + uint64(layerSeedStep*k)
	for i := range p.NGramSize {
		v := Splitmix64(base + Gamma*uint64(i+1))
		c.Multipliers = append(c.Multipliers, int64(2*(v%half)+1))
	}
	primes := primesFrom(p.VocabBase, (k+1)*p.Heads)
	var sum int64
	for _, q := range primes[k*p.Heads:] {
		c.Primes = append(c.Primes, q)
		c.Offsets = append(c.Offsets, sum)
		sum += q
	}
	c.Rows = (sum + p.Divisor - 1) / p.Divisor * p.Divisor
	return c
}

// Splitmix64 is Vigna's splitmix64 output function of state v.
func Splitmix64(v uint64) uint64 {
	v += Gamma
	v = (v ^ v>>30) * 0xBF58476D1CE4E5B9
	v = (v ^ v>>27) * 0x94D049BB133111EB
	return v ^ v>>31
}

// primesFrom returns the first n primes ≥ from, by trial division as
// transformers finds them.
func primesFrom(from int64, n int) []int64 {
	out := make([]int64, 0, n)
	for c := from; len(out) < n; c++ {
		if isPrime(c) {
			out = append(out, c)
		}
	}
	return out
}

func isPrime(n int64) bool {
	if n < 2 {
		return false
	}
	if n%2 == 0 {
		return n == 2
	}
	for d := int64(3); d*d <= n; d += 2 {
		if n%d == 0 {
			return false
		}
	}
	return true
}

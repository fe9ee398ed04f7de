package kernels

// SumWords sums buf 8 bytes at a time with four accumulators (a tail of
// fewer than four words is left out): the plain read of memory that the
// kernels' benchmarks and the runtime's bench compare weight reads with.
func SumWords(buf []uint64) uint64 {
	var a, b, c, d uint64
	for i := 0; i+4 <= len(buf); i += 4 {
		v := buf[i : i+4 : i+4]
		a += v[0]
		b += v[1]
		c += v[2]
		d += v[3]
	}
	return a + b + c + d
}

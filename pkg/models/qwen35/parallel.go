package qwen35

// parallelHeads runs fn over heads [0, n) on the pool's threads, one
// contiguous span per thread to start with (a thread that finishes early
// takes over the span of one that has not started). Heads are independent —
// each has its own recurrent state or its own output slice — and each head
// is computed start to finish by one goroutine with the same code, so the
// split can never change a result.
func (m *Model) parallelHeads(n int, fn func(worker, lo, hi int)) {
	m.pool.Parallel(n, fn)
}

// workerSlots returns buf with at least one element per pool thread; call
// it before parallelHeads so no goroutine grows a shared slice.
func workerSlots[T any](buf []T, threads int) []T {
	if len(buf) < threads {
		buf = append(buf, make([]T, threads-len(buf))...)
	}
	return buf
}

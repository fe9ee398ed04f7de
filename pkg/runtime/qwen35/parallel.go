package qwen35

import "sync"

// parallelHeads runs fn over heads [0, n) split into one contiguous span per
// pool thread (the caller runs the first). Heads are independent — each has
// its own recurrent state or its own output slice — and each head is
// computed start to finish by one goroutine with the same code, so the
// split can never change a result.
func (m *Model) parallelHeads(n int, fn func(worker, lo, hi int)) {
	threads := min(m.pool.Threads(), n)
	if threads <= 1 {
		fn(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for w := 1; w < threads; w++ {
		lo, hi := w*n/threads, (w+1)*n/threads
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(w, lo, hi)
		}()
	}
	fn(0, 0, n/threads)
	wg.Wait()
}

// workerSlots returns buf with at least one element per pool thread; call
// it before parallelHeads so no goroutine grows a shared slice.
func workerSlots[T any](buf []T, threads int) []T {
	if len(buf) < threads {
		buf = append(buf, make([]T, threads-len(buf))...)
	}
	return buf
}

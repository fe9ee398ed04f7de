package devshared

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
)

// CheckForward refuses a Forward of ids before anything is enqueued: after
// an earlier failure, with no tokens, with a token outside [0, V), or past
// maxCtx from pos. engine prefixes the messages ("gpu", "qwen38gpu").
func CheckForward(engine string, failed error, ids []int, V, pos, maxCtx int) error {
	if failed != nil {
		return fmt.Errorf("%s: the sequence failed earlier (%v); start a new one", engine, failed)
	}
	if len(ids) == 0 {
		return fmt.Errorf("%s: Forward: no tokens", engine)
	}
	for i, id := range ids {
		if id < 0 || id >= V {
			return fmt.Errorf("%s: Forward: token %d at index %d is outside the vocabulary [0, %d)", engine, id, i, V)
		}
	}
	if pos+len(ids) > maxCtx {
		return fmt.Errorf("%s: Forward: %d tokens after %d would pass the max context of %d", engine, len(ids), pos, maxCtx)
	}
	return nil
}

// RunForward is a checked Forward's device work: when pos+len(ids) passes
// the KV capacity kcap, allocKV grows it (doubling, at most maxCtx, keeping
// the pos tokens held); then pass runs ids in chunks of chunkLen, and a
// prefill is synced (its time belongs to the prompt, not the first decode
// step).
func RunForward(c *cuda.Ctx, ids []int, pos, kcap, maxCtx, chunkLen int, allocKV func(capacity, keep int) error, pass func(chunk []int) error) error {
	if need := pos + len(ids); need > kcap {
		capacity := kcap
		for capacity < need {
			capacity *= 2
		}
		if err := allocKV(min(capacity, maxCtx), pos); err != nil {
			return err
		}
	}
	for start := 0; start < len(ids); start += chunkLen {
		if err := pass(ids[start:min(start+chunkLen, len(ids))]); err != nil {
			return err
		}
	}
	if len(ids) > 1 {
		return c.Sync()
	}
	return nil
}

// GrowRows replaces *buf with rows·row bytes that begin with its first
// keep rows; the old buffer is freed after a Sync, as kernels queued
// before may still read it. An allocation that fails is returned through
// noRoom, which names what had no room.
func GrowRows(c *cuda.Ctx, buf *cuda.DevicePtr, row int64, rows, keep int, noRoom func(error) error) error {
	p, err := c.Alloc(uint64(row) * uint64(rows))
	if err != nil {
		return noRoom(err)
	}
	if *buf != 0 {
		if keep > 0 {
			if err := c.DtoD(p, *buf, uint64(row)*uint64(keep)); err != nil {
				return err
			}
		}
		if err := c.Sync(); err != nil {
			return err
		}
		c.Free(*buf)
	}
	*buf = p
	return nil
}

// Forward is the engines' State.Forward: ids are checked (CheckForward),
// then run on dev (RunForward); an error is also kept in *failed, which
// refuses every later Forward.
func Forward(engine string, dev *cuda.Device, failed *error, ids []int, V, pos, kcap, maxCtx, chunkLen int,
	allocKV func(c *cuda.Ctx, capacity, keep int) error, pass func(c *cuda.Ctx, chunk []int) error) error {
	if err := CheckForward(engine, *failed, ids, V, pos, maxCtx); err != nil {
		return err
	}
	err := dev.Do(func(c *cuda.Ctx) error {
		return RunForward(c, ids, pos, kcap, maxCtx, chunkLen,
			func(capacity, keep int) error { return allocKV(c, capacity, keep) },
			func(chunk []int) error { return pass(c, chunk) })
	})
	if err != nil {
		*failed = err
	}
	return err
}

// Zeroed allocates a state's zeroed device buffers: each at least 4 bytes,
// appended to *Allocs (the state frees them). After the first error it
// allocates nothing more and returns 0; Err holds that error.
type Zeroed struct {
	C      *cuda.Ctx
	Allocs *[]cuda.DevicePtr
	Err    error
}

// Alloc returns n zeroed bytes (at least 4).
func (z *Zeroed) Alloc(n int) cuda.DevicePtr {
	if z.Err != nil {
		return 0
	}
	p, e := z.C.Alloc(uint64(max(n, 4)))
	if e != nil {
		z.Err = e
		return 0
	}
	*z.Allocs = append(*z.Allocs, p)
	if e := z.C.Memset32(p, 0, uint64(max(n, 4)/4)); e != nil && z.Err == nil {
		z.Err = e
	}
	return p
}

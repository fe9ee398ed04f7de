package main

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
	"os"
	"path/filepath"
)

// chunkValues is the unit of generation: chunk k of a tensor is drawn from
// its own generator seeded by (seed, tensor name, k), so the bytes do not
// depend on the thread count.
const chunkValues = 4 << 20

// rng is wyrand: fast, and good enough for weights nobody reads.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(r.s, r.s^0xe7037ed1a0b428db)
	return hi ^ lo
}

func chunkRNG(seed uint64, name string, k int) rng {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(k))
	h.Write(b[:])
	h.Write([]byte(name))
	return rng{s: h.Sum64()}
}

// fill draws n values of t's distribution for chunk k.
func (t *tensor) fill(dst []float32, seed uint64, k int) {
	if t.init.constant {
		for i := range dst {
			dst[i] = t.init.lo
		}
		return
	}
	r := chunkRNG(seed, t.name, k)
	span := t.init.hi - t.init.lo
	for i := range dst {
		// 23 random mantissa bits: U[1, 2) − 1 scaled into [lo, hi).
		u := math.Float32frombits(uint32(r.next()>>41) | 0x3f800000)
		dst[i] = float32((u-1)*span) + t.init.lo
	}
}

func (t *tensor) encode(dst []byte, x []float32) []byte {
	switch t.typ.id {
	case typeQ4_0.id:
		return quantizeQ4_0(dst, x)
	case typeQ8_0.id:
		return quantizeQ8_0(dst, x)
	}
	for _, v := range x {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
	}
	return dst
}

type job struct {
	t     *tensor
	k     int
	n     int
	bytes chan []byte
}

func (t *tensor) chunks() []int {
	rowsPer := max(1, chunkValues/int(t.ne[0]))
	rows := int(t.values() / t.ne[0])
	var sizes []int
	for r := 0; r < rows; r += rowsPer {
		sizes = append(sizes, min(rowsPer, rows-r)*int(t.ne[0]))
	}
	return sizes
}

// writeFile writes the GGUF to a temporary file beside path, generating
// chunks on threads goroutines while one writes them in order, then syncs
// and renames it into place.
func writeFile(path string, header []byte, tensors []*tensor, total int64, seed uint64, threads int) (err error) {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".partial")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	jobs := make(chan *job, 2*threads)
	order := make(chan *job, 2*threads)
	go func() {
		defer close(order)
		for _, t := range tensors {
			for k, n := range t.chunks() {
				j := &job{t: t, k: k, n: n, bytes: make(chan []byte, 1)}
				jobs <- j
				order <- j
			}
		}
		close(jobs)
	}()
	for range threads {
		go func() {
			x := make([]float32, 0, chunkValues)
			for j := range jobs {
				x = x[:j.n]
				j.t.fill(x, seed, j.k)
				j.bytes <- j.t.encode(make([]byte, 0, j.n/j.t.typ.block*j.t.typ.blockBytes), x)
			}
		}()
	}
	if _, err = f.Write(header); err != nil {
		return drain(order, err)
	}
	written := int64(len(header))
	var cur *tensor
	var curBytes int64
	pad := func() error {
		if cur == nil {
			return nil
		}
		if curBytes != cur.bytes() {
			return fmt.Errorf("%s: wrote %d bytes, want %d", cur.name, curBytes, cur.bytes())
		}
		n := alignUp(curBytes) - curBytes
		_, err := f.Write(make([]byte, n))
		written += n
		return err
	}
	for j := range order {
		if j.t != cur {
			if err = pad(); err != nil {
				return drain(order, err)
			}
			cur, curBytes = j.t, 0
		}
		b := <-j.bytes
		if _, err = f.Write(b); err != nil {
			return drain(order, err)
		}
		curBytes += int64(len(b))
		written += int64(len(b))
	}
	if err = pad(); err != nil {
		return err
	}
	if written != total {
		return fmt.Errorf("wrote %d bytes, planned %d", written, total)
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// drain lets the generators finish after a write error.
func drain(order chan *job, err error) error {
	for j := range order {
		<-j.bytes
	}
	return err
}

package convert

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	goruntime "runtime"

	"golang.org/x/sync/errgroup"

	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/quant"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

// block is a run of whole rows of one source tensor.
type block struct {
	raw        []byte
	dt         safetensors.DType
	rows, cols int
	f32        []float32 // widened lazily, shared by every output
}

func newBlock(raw []byte, dt safetensors.DType, rows, cols int) (*block, error) {
	switch dt {
	case "BF16", "F16", "F32":
		return &block{raw: raw, dt: dt, rows: rows, cols: cols}, nil
	}
	return nil, fmt.Errorf("dtype %s cannot be converted: weights must be BF16, F16 or F32", dt)
}

// floats returns the block widened to float32 (exact for every source
// dtype), widening on every core: it is on the converter's serial path.
func (b *block) floats() []float32 {
	if b.f32 != nil {
		return b.f32
	}
	n := b.rows * b.cols
	b.f32 = make([]float32, n)
	var g errgroup.Group
	per := max(n/goruntime.NumCPU()+1, 1<<16)
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		g.Go(func() error {
			switch b.dt {
			case "BF16":
				quant.WidenBF16(b.f32[lo:hi], b.raw[2*lo:2*hi])
			case "F16":
				quant.WidenF16(b.f32[lo:hi], b.raw[2*lo:2*hi])
			default:
				quant.WidenF32(b.f32[lo:hi], b.raw[4*lo:4*hi])
			}
			return nil
		})
	}
	g.Wait()
	return b.f32
}

type piece struct {
	r0 int
	b  *block
}

// split cuts the block (starting at tensor row r0) at tensor row at.
func (b *block) split(r0, at int) []piece {
	if r0 >= at || r0+b.rows <= at {
		return []piece{{r0, b}}
	}
	k := at - r0
	return []piece{{r0, b.sub(0, k)}, {at, b.sub(k, b.rows)}}
}

func (b *block) sub(from, to int) *block {
	es := b.dt.Size()
	s := &block{raw: b.raw[from*b.cols*es : to*b.cols*es], dt: b.dt, rows: to - from, cols: b.cols}
	if b.f32 != nil {
		s.f32 = b.f32[from*b.cols : to*b.cols]
	}
	return s
}

// writeRows encodes the block as t's encoding and writes it at rows
// [r0, r0+rows) of t, inside f at base.
func writeRows(f *os.File, base int64, t *packexperts.Tensor, r0 int, b *block, threads int) error {
	cols := b.cols
	if int64(cols)*rowsOf(t) != elems(t.Shape) {
		return fmt.Errorf("row width %d does not match %s %v", cols, t.Name, t.Shape)
	}
	switch t.DType {
	case packexperts.DTypeF32:
		out := make([]byte, 4*len(b.floats()))
		for i, v := range b.floats() {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
		_, err := f.WriteAt(out, base+t.Offset+int64(r0*cols*4))
		return err
	case packexperts.DTypeBF16:
		_, err := f.WriteAt(b.bf16(), base+t.Offset+int64(r0*cols*2))
		return err
	case packexperts.DTypeU32:
		return writeQuantRows(f, base, t, r0, b, threads)
	}
	return fmt.Errorf("tensor %s: cannot write dtype %s", t.Name, t.DType)
}

// bf16 returns the block as bf16: the source bytes when already bf16 (bit
// exact), else rounded to nearest even.
func (b *block) bf16() []byte {
	if b.dt == "BF16" {
		return b.raw
	}
	fs := b.floats()
	out := make([]byte, 2*len(fs))
	for i, v := range fs {
		binary.LittleEndian.PutUint16(out[2*i:], quant.F32ToBF16(v))
	}
	return out
}

func writeQuantRows(f *os.File, base int64, t *packexperts.Tensor, r0 int, b *block, threads int) error {
	cols, bits := b.cols, t.Bits
	wRow, sRow := cols*bits/8, cols/limits.QuantGroupSize*2
	w := make([]byte, b.rows*wRow)
	s := make([]byte, b.rows*sRow)
	bi := make([]byte, b.rows*sRow)
	fs := b.floats()
	var g errgroup.Group
	per := (b.rows + threads - 1) / threads
	for lo := 0; lo < b.rows; lo += per {
		hi := min(lo+per, b.rows)
		g.Go(func() error {
			for r := lo; r < hi; r++ {
				err := quant.QuantizeRow(w[r*wRow:(r+1)*wRow], s[r*sRow:(r+1)*sRow], bi[r*sRow:(r+1)*sRow], fs[r*cols:(r+1)*cols], bits)
				if err != nil {
					return fmt.Errorf("tensor %s row %d: %w", t.Name, r0+r, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	writes := []struct {
		data []byte
		off  int64
	}{{w, t.Offset + int64(r0*wRow)}, {s, t.Scales.Offset + int64(r0*sRow)}, {bi, t.Biases.Offset + int64(r0*sRow)}}
	for _, wr := range writes {
		if _, err := f.WriteAt(wr.data, base+wr.off); err != nil {
			return err
		}
	}
	return nil
}

func elems(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

func rowsOf(t *packexperts.Tensor) int64 {
	if len(t.Shape) < 2 {
		return 1
	}
	return t.Shape[0]
}

package gpu

import (
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/kernels"
)

// passOps are the product, norm and SwiGLU launches a forward pass
// (forward, forwardBatch) makes over its scratch, with the bookkeeping
// both need: what the quantized scratch holds (held), so an input read by
// several launches in a row is quantized once, and, with Set.NormFold in
// decode, a norm left to the multi-product launch that reads it (folded).
type passOps struct {
	l     *gpukernels.Launcher
	do    func(error) // keeps the pass's first error
	qa    *gpukernels.QAct
	x, u  cuda.DevicePtr // the residual stream and its normed rows
	H     int
	eps   float32
	rows  int  // the vectors a launch carries: a pass's tokens, or a batch's sequences
	fused bool // decode: products of one input in one launch (multi), norms folded into them

	held   quantized
	folded cuda.DevicePtr // the scale of the norm left to the next multi, 0 when none
}

// quantized names what the quantized scratch holds.
type quantized struct {
	x             cuda.DevicePtr
	vectors, cols int
}

func anyQuantized(ws ...*gpukernels.Mat) bool {
	for _, w := range ws {
		if w != nil && w.Quantized() {
			return true
		}
	}
	return false
}

// unfold launches a folded norm on its own, for a reader other than multi.
func (o *passOps) unfold() {
	if o.folded != 0 {
		o.do(o.l.RMSNormQuantize(o.qa, o.u, o.x, o.folded, o.H, o.rows, o.eps))
		o.held, o.folded = quantized{o.u, o.rows, o.H}, 0
	}
}

// quantize puts x [vectors, cols] in the scratch unless it is there.
func (o *passOps) quantize(x cuda.DevicePtr, vectors, cols int) {
	if o.held != (quantized{x, vectors, cols}) {
		o.do(o.l.Quantize(o.qa, x, vectors, cols))
		o.held = quantized{x, vectors, cols}
	}
}

// overwrite forgets the scratch's input when a launch is about to write
// over it (the launch itself still reads the scratch).
func (o *passOps) overwrite(outs ...cuda.DevicePtr) {
	for _, out := range outs {
		if out == o.held.x {
			o.held = quantized{}
		}
	}
}

// gemv quantizes x (when any of ws is quantized) and has product multiply
// each w of ws by it into its out.
func (o *passOps) gemv(x cuda.DevicePtr, vectors, cols int, outs []cuda.DevicePtr, ws []*gpukernels.Mat, product func(out cuda.DevicePtr, w *gpukernels.Mat)) {
	o.unfold()
	if anyQuantized(ws...) {
		o.quantize(x, vectors, cols)
	}
	o.overwrite(outs...)
	for i, w := range ws {
		product(outs[i], w)
	}
}

// multi runs several products of x [rows, cols] in one launch (decode),
// with the folded norm when x is its output.
func (o *passOps) multi(x cuda.DevicePtr, cols int, segs ...gpukernels.Seg) {
	if o.folded != 0 && x == o.u {
		o.do(o.l.MGEMVNorm(segs, o.qa, o.u, o.x, o.folded, o.H, o.rows, o.eps))
		o.held, o.folded = quantized{o.u, o.rows, o.H}, 0
		return
	}
	o.unfold()
	var q *gpukernels.QAct
	for _, sg := range segs {
		if sg.M.Quantized() {
			o.quantize(x, o.rows, cols)
			q = o.qa
			break
		}
	}
	for _, sg := range segs {
		o.overwrite(sg.Y)
	}
	o.do(o.l.MGEMV(segs, x, q, o.rows))
}

// norm is RMSNorm of x into u, quantized in the same launch when a
// product that reads u is quantized; in decode with Set.NormFold it is
// left to the multi that reads u (mgemv_n).
func (o *passOps) norm(scale cuda.DevicePtr, readers ...*gpukernels.Mat) {
	o.unfold()
	if o.fused && o.l.K.NormFold && o.H <= gpukernels.NormFoldMaxCols && o.H%kernels.GroupSize == 0 && anyQuantized(readers...) {
		o.folded = scale
		return
	}
	if anyQuantized(readers...) {
		o.do(o.l.RMSNormQuantize(o.qa, o.u, o.x, scale, o.H, o.rows, o.eps))
		o.held = quantized{o.u, o.rows, o.H}
		return
	}
	o.do(o.l.RMSNorm(o.u, o.x, scale, o.H, o.rows, o.eps))
	o.held = quantized{}
}

// swiglu is g = silu(g)·u over vectors·cols, quantized in the same
// launch when its reader is.
func (o *passOps) swiglu(gp, up cuda.DevicePtr, vectors, cols int, reader *gpukernels.Mat) {
	if reader.Quantized() {
		o.do(o.l.SwiGLUQuantize(o.qa, gp, up, vectors, cols))
		o.held = quantized{gp, vectors, cols}
		return
	}
	o.do(o.l.SwiGLU(gp, up, vectors*cols))
}

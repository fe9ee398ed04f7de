package gpukernels

import (
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// The launch planning that needs no GPU: bad mgemv tables and moe_down
// shapes are refused before anything is launched, and the delta rule's
// split is used only where its shared memory fits.
func TestLaunchPlanningWithoutGPU(t *testing.T) {
	l := &Launcher{} // no context: every case must fail before a launch
	q4 := &Mat{Rows: 8, Cols: 128, Enc: kernels.Q4}
	q4w := &Mat{Rows: 8, Cols: 256, Enc: kernels.Q4}
	bf := &Mat{Rows: 8, Cols: 128, Enc: kernels.BF16}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"no products", l.MGEMV(nil, 0, nil, 1), "1 to 8 products"},
		{"nine products", l.MGEMV(make([]Seg, 9), 0, nil, 1), "1 to 8 products"},
		{"columns differ", l.MGEMV([]Seg{{M: q4}, {M: q4w}}, 0, &QAct{}, 1), "256 columns"},
		{"quantized without input", l.MGEMV([]Seg{{M: bf}, {M: q4}}, 0, nil, 1), "no quantized input"},
		{"float down", l.MoEDown(0, bf, bf, &QAct{}, 0, 0, 0, 8, 1, 1), "one quantized shape"},
		{"shapes differ", l.MoEDown(0, q4, q4w, &QAct{}, 0, 0, 0, 8, 1, 1), "one quantized shape"},
		{"grouped float", l.GEMVGrouped(0, bf, &QAct{}, 0, 0, 8, 16, false), "Q4/Q8"},
		{"too many experts", l.MoEGroup(0, 0, 0, 8, 2048), "1024"},
		{"gated norm not whole groups", l.GDNNorm(0, 0, 0, 0, GDNShape{Dv: 32, Hv: 4}, 1e-6, 1, &QAct{}), "whole groups"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
	}
	if l.Count != 0 {
		t.Errorf("%d launches counted; every case should have been refused first", l.Count)
	}
	qwen := GDNShape{C: 8192, Hk: 16, Hv: 32, Dk: 128, Dv: 128}
	if !GDNSplitFits(qwen, 256) || !GDNSplitFits(qwen, 1024) {
		t.Errorf("the 35B-A3B delta rule (%d bytes for 256 tokens) should fit the split kernel", GDNRecShared(qwen, 256))
	}
	if GDNSplitFits(GDNShape{Dk: 100, Dv: 128}, 256) || GDNSplitFits(GDNShape{Dk: 256, Dv: 128}, 8) {
		t.Error("key heads that are not a multiple of 32 up to 128 must take gdn_heads")
	}
	if got, want := GDNRecShared(qwen, 1), (32*128+3*128+4+2*128)*4; got != want {
		t.Errorf("shared memory for one token %d, want %d (q, k twice, the staged q and k included)", got, want)
	}
}

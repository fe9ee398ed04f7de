package gpukernels

import (
	"testing"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// A Mat's bytes are the host matrix's (data, bfloat16 scales and biases a
// group): the layout kernels.Matrix.Validate accepts.
func TestMatReadBytesIsTheMatrixLayout(t *testing.T) {
	const rows, cols = 6, 256
	groups := rows * cols / kernels.GroupSize
	for _, tc := range []struct {
		enc                  kernels.Encoding
		data, scales, biases int
	}{
		{kernels.Q4, rows * cols / 2, 2 * groups, 2 * groups},
		{kernels.Q8, rows * cols, 2 * groups, 2 * groups},
		{kernels.F32, 4 * rows * cols, 0, 0},
		{kernels.BF16, 2 * rows * cols, 0, 0},
		{kernels.F16, 2 * rows * cols, 0, 0},
	} {
		km := kernels.Matrix{Rows: rows, Cols: cols, Enc: tc.enc, Data: make([]byte, tc.data), Scales: make([]byte, tc.scales), Biases: make([]byte, tc.biases)}
		if err := km.Validate(); err != nil {
			t.Fatalf("%v: the test's layout is not the host's: %v", tc.enc, err)
		}
		m := &Mat{Rows: rows, Cols: cols, Enc: tc.enc}
		total := int64(tc.data + tc.scales + tc.biases)
		if got := m.ReadBytes(1); got != total {
			t.Errorf("%v: ReadBytes(1) = %d, want %d", tc.enc, got, total)
		}
		if got := m.ReadBytes(0); got != total {
			t.Errorf("%v: ReadBytes(0) = %d, want one matrix, %d", tc.enc, got, total)
		}
		if got := m.ReadBytes(8); got != 8*total {
			t.Errorf("%v: ReadBytes(8) = %d, want 8 experts, %d", tc.enc, got, 8*total)
		}
		if got := m.RowBytes() * rows; got != total {
			t.Errorf("%v: RowBytes·rows = %d, want %d", tc.enc, got, total)
		}
	}
}

// Each launcher that takes weights says what the launch reads (LastReads):
// a gathered product its k experts, mgemv every segment, moe_down k routed
// experts and the shared one, embed a row a token; the next launch without
// weights reads 0. No device: the launch panics after the accounting.
func TestLastReadsPerLauncher(t *testing.T) {
	q4 := &Mat{Rows: 64, Cols: 256, Enc: kernels.Q4, EData: 1}
	q8 := &Mat{Rows: 32, Cols: 256, Enc: kernels.Q8}
	bf := &Mat{Rows: 16, Cols: 256, Enc: kernels.BF16}
	q := &QAct{}
	for _, tc := range []struct {
		name   string
		launch func(l *Launcher) error
		want   int64
	}{
		{"gemv", func(l *Launcher) error { return l.GEMV(0, q8, 0, q, 0, 0, 1, false, 1) }, q8.ReadBytes(1)},
		{"gathered gemv", func(l *Launcher) error { return l.GEMV(0, q4, 0, q, 0, 1, 8, false, 1) }, 8 * q4.ReadBytes(1)},
		{"float gemv", func(l *Launcher) error { return l.GEMV(0, bf, 0, q, 0, 0, 1, false, 1) }, bf.ReadBytes(1)},
		{"mgemv", func(l *Launcher) error {
			return l.MGEMV([]Seg{{M: q8}, {M: q4, Sel: 1, Slots: 8}, {M: bf}}, 0, q, 1)
		}, q8.ReadBytes(1) + 8*q4.ReadBytes(1) + bf.ReadBytes(1)},
		{"moe_down", func(l *Launcher) error { return l.MoEDown(0, q4, q4, q, 0, 0, 0, 8, 1, 1) }, 9 * q4.ReadBytes(1)},
		{"embed", func(l *Launcher) error { return l.Embed(0, q8, 0, 3) }, 3 * q8.RowBytes()},
		{"grouped: every expert", func(l *Launcher) error { return l.GEMVGrouped(0, q4, q, 0, 0, 8, 128, false) }, 128 * q4.ReadBytes(1)},
		{"no weights", func(l *Launcher) error { return l.RMSNorm(0, 0, 0, 256, 1, 1e-6) }, 0},
	} {
		l := &Launcher{K: &Set{}}
		l.last = -1
		launched(t, func() error { return l.GEMV(0, q8, 0, q, 0, 0, 1, false, 1) }) // a stale figure the next launch must replace
		launched(t, func() error { return tc.launch(l) })
		if got := l.LastReads(); got != tc.want {
			t.Errorf("%s: LastReads %d, want %d", tc.name, got, tc.want)
		}
	}
}

// launched runs a launcher without a device: it must reach the launch
// (and panic there), not refuse the arguments.
func launched(t *testing.T, f func() error) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("the launch did not reach the device")
		}
	}()
	if err := f(); err != nil {
		t.Errorf("refused: %v", err)
	}
}

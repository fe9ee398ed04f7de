package qwen38gpu

import (
	"testing"

	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/gpu/cuda/cudatest"
)

// TestQwen38GPUDecodeGraphBitwise: greedy decode steps replayed as CUDA
// graphs give bitwise the logits of the same steps launched kernel by
// kernel (NoGraph), at KV widths 32, 16 and 8, from a short prompt across
// the dense window into sparse attention (a second graph), through block
// completions and KV growth (the graphs captured afresh); a restore into
// a state holding graphs continues bitwise too.
func TestQwen38GPUDecodeGraphBitwise(t *testing.T) {
	cudatest.Need(t)
	for _, c := range []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"synth-8bit", func(t *testing.T) string { return synthInstall(t, 8) }},
		// the trained n-gram table: the rows copied ahead of the replay matter
		{"fixture-16bit", func(t *testing.T) string { return fixinstall.Install(t, fixture(t, qwen38Layouts[0]), 16) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := loadEngine(t, c.dir(t), true)
			b := e.Model().(*Backend)
			V := b.Model.Config().VocabSize
			prompt := synthPrompt(5, e.Install.Manifest.Geometry.Qwen4Exp.PLEResetTokenID)
			const steps = 40
			for _, bits := range []int{32, 16, 8} {
				// decode runs the prompt then steps greedy tokens, returning
				// every step's logits; restoreAt > 0 snapshots there, decodes
				// on, then restores and decodes the rest again from it.
				decode := func(noGraph bool, restoreAt int) ([][]float32, int) {
					st, err := b.Model.NewState(StateOptions{KVInitial: 4, KVBits: bits, NoGraph: noGraph})
					if err != nil {
						t.Fatal(err)
					}
					defer st.Close()
					if err := st.Forward(prompt); err != nil {
						t.Fatal(err)
					}
					var rows [][]float32
					for i := 0; i < steps; i++ {
						if i == restoreAt && restoreAt > 0 {
							sn, err := st.Snapshot()
							if err != nil {
								t.Fatal(err)
							}
							for range 5 { // graphs captured past the snapshot
								id, _ := st.Argmax()
								if err := st.Forward([]int{id}); err != nil {
									t.Fatal(err)
								}
							}
							if err := st.Restore(sn); err != nil {
								t.Fatal(err)
							}
						}
						id, err := st.Argmax()
						if err != nil {
							t.Fatal(err)
						}
						if err := st.Forward([]int{id}); err != nil {
							t.Fatal(err)
						}
						row := make([]float32, V)
						if err := st.Logits(row); err != nil {
							t.Fatal(err)
						}
						rows = append(rows, row)
					}
					return rows, st.GraphKernels()
				}
				want, none := decode(true, 0)
				got, kernels := decode(false, 0)
				restored, _ := decode(false, 20)
				if none != 0 || kernels == 0 {
					t.Fatalf("kv %d: graph kernels %d with NoGraph, %d with graphs", bits, none, kernels)
				}
				t.Logf("kv %d: the decode graph holds %d kernels", bits, kernels)
				for i := range want {
					if d := cudatest.MaxAbsDiff(got[i], want[i]); d != 0 {
						t.Fatalf("kv %d step %d (position %d): graph vs kernel by kernel logits differ by %g", bits, i, len(prompt)+i, d)
					}
					if d := cudatest.MaxAbsDiff(restored[i], want[i]); d != 0 {
						t.Fatalf("kv %d step %d: graphs after a restore differ by %g", bits, i, d)
					}
				}
			}
		})
	}
}

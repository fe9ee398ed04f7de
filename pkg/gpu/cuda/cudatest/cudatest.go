// Package cudatest holds what the GPU packages' tests share: skipping, with
// the reason, where no GPU is usable, and failing instead under
// NVMAI_GPU=1, which the GPU machine's scripts set so that a GPU test never
// passes by skipping there.
package cudatest

import (
	"math"
	"os"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
)

var (
	once    sync.Once
	openErr error
)

// Need skips the test unless device 0 opens (tried once per test binary);
// NVMAI_GPU=1 turns the skip into a failure.
func Need(t testing.TB) {
	t.Helper()
	once.Do(func() {
		dev, err := cuda.Open(0)
		if err == nil {
			dev.Close()
		}
		openErr = err
	})
	Unusable(t, openErr)
}

// Unusable skips the test when err, why the GPU cannot serve it, is not
// nil; NVMAI_GPU=1 turns the skip into a failure.
func Unusable(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("NVMAI_GPU") == "1" {
		t.Fatalf("NVMAI_GPU=1 but no usable GPU: %v", err)
	}
	t.Skipf("no usable GPU: %v", err)
}

// Sequence is a GPU engine's State, as LastLogits feeds it.
type Sequence interface {
	Forward(ids []int) error
	Logits(dst []float32) error
	Close()
}

// LastLogits feeds ids to a fresh sequence of newState, whole (one Forward:
// the engine's prefill passes) or token by token, and returns its last
// logits [V]; the sequence is closed.
func LastLogits(t testing.TB, newState func() (Sequence, error), ids []int, whole bool, V int) []float32 {
	t.Helper()
	st, err := newState()
	if err != nil {
		t.Fatal(err)
	}
	if whole {
		err = st.Forward(ids)
	} else {
		for _, id := range ids {
			if err = st.Forward([]int{id}); err != nil {
				break
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, V)
	if err := st.Logits(row); err != nil {
		t.Fatal(err)
	}
	st.Close()
	return row
}

// MaxAbsDiff is the largest |a[i] − b[i]| (float64); +Inf when the
// lengths differ.
func MaxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// RelErr is ‖got − want‖ / ‖want‖ (float64 sums in index order).
func RelErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i] - want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

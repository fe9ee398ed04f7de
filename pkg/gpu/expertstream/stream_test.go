package expertstream

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
)

// SumCounters sums each layer's words into StreamStats' fields and keeps
// the rows; a layer that was not streamed stays zero.
func TestSumCounters(t *testing.T) {
	const W = gpukernels.SlotStatsWords
	raw := make([]uint64, 3*W)
	for j := range W {
		raw[j] = uint64(j + 1)            // layer 0
		raw[2*W+j] = uint64(10 * (j + 1)) // layer 2; layer 1 zero
	}
	s := SumCounters(raw, 3)
	if len(s.Layers) != 3 || s.Layers[1] != [W]int64{} || s.Layers[2][WordAheadBytes] != 110 {
		t.Fatalf("layers %v", s.Layers)
	}
	got := []int64{s.DecodeHits, s.DecodeMisses, s.DecodeBytes, s.PrefillFromVRAM, s.PrefillFromHost, s.PrefillBytes, s.Guesses, s.Guessed, s.AheadCopies, s.AheadUsed, s.AheadBytes}
	for j, v := range got {
		if want := int64(11 * (j + 1)); v != want {
			t.Errorf("word %d sums to %d, want %d", j, v, want)
		}
	}
}

// ReadExpertFile reads a file of exactly the record bytes and refuses one
// of another size, naming it.
func TestReadExpertFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "layer-0.experts")
	if err := os.WriteFile(path, []byte("0123456789abcdef"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 16)
	if err := ReadExpertFile(path, dst); err != nil || string(dst) != "0123456789abcdef" {
		t.Fatalf("read %q, %v", dst, err)
	}
	if err := ReadExpertFile(path, make([]byte, 32)); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "32 bytes") {
		t.Fatalf("a short file: %v", err)
	}
}

package hugemem

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func TestLoadFileSplitsColdAndHot(t *testing.T) {
	data := make([]byte, 3*PageSize+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	path := filepath.Join(t.TempDir(), "resident.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, coldEnd := range []int64{0, 100, 4096, PageSize + 5000, int64(len(data)), int64(len(data)) + 9} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := LoadFile(f, int64(len(data)), coldEnd)
		f.Close() // the mapping outlives the descriptor
		if err != nil {
			t.Fatalf("coldEnd %d: %v", coldEnd, err)
		}
		if !bytes.Equal(r.Bytes, data) {
			t.Fatalf("coldEnd %d: the loaded bytes differ from the file", coldEnd)
		}
		hotStart := min(coldEnd, int64(len(data))) &^ 4095
		if hotStart < int64(len(data)) && !Disabled() {
			if a := addressOf(r.Bytes[hotStart:]) % PageSize; a != 0 {
				t.Fatalf("coldEnd %d: the copy starts %d bytes past a huge page", coldEnd, a)
			}
		}
		if err := r.Free(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadFileShortFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "short.bin")
	if err := os.WriteFile(path, make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := LoadFile(f, 8192, 0); err == nil {
		t.Fatal("loading 8192 bytes of a 100-byte file succeeded")
	}
}

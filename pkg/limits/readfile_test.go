package limits

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("12345"), 0o644)
	if b, err := ReadFile(p, 5); err != nil || string(b) != "12345" {
		t.Fatalf("at the limit: %q, %v", b, err)
	}
	var tl *TooLargeError
	if _, err := ReadFile(p, 4); !errors.As(err, &tl) || tl.Size != 5 || tl.Limit != 4 {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := ReadFile(dir, 100); err == nil {
		t.Fatal("a directory was read")
	}
	if _, err := ReadFile(filepath.Join(dir, "absent"), 100); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// The shared ceilings must agree where one file is read by two packages:
// a manifest derives from the source index, and the receipt from the manifest.
func TestCeilingsAgree(t *testing.T) {
	if Manifest < SafetensorsIndex || Receipt < Manifest {
		t.Fatalf("manifest %d / receipt %d must hold what the index %d describes", Manifest, Receipt, SafetensorsIndex)
	}
	if SafetensorsHeader != 100_000_000 {
		t.Fatalf("safetensors header ceiling %d is not the format's 100,000,000", SafetensorsHeader)
	}
	if DirectIOAlign%4096 != 0 || QuantGroupSize != 64 {
		t.Fatal("alignment or group size changed")
	}
}

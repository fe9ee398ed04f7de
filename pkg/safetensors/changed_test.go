package safetensors

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CheckUnchanged tells the file Open validated from one written in place,
// grown, or replaced by path (probe C7), and Stream reads the validated
// descriptor even after the path names another file.
func TestCheckUnchanged(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, path string)
		want   string // "" = unchanged
	}{
		{"untouched", func(*testing.T, string) {}, ""},
		{"replaced by rename", func(t *testing.T, path string) {
			writeTiny(t, path+".new", 7)
			if err := os.Rename(path+".new", path); err != nil {
				t.Fatal(err)
			}
		}, "replaced by another file"},
		{"removed", func(t *testing.T, path string) { os.Remove(path) }, "can no longer be opened"},
		{"grown", func(t *testing.T, path string) {
			f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			f.Write([]byte("tail"))
			f.Close()
		}, "size went from"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.safetensors")
			writeTiny(t, path, 1)
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tc.change(t, path)
			all, err := io.ReadAll(f.Stream())
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(all)) < f.Size() || all[f.Header().DataOffset] != 1 {
				t.Errorf("Stream did not read the validated file's bytes (%d bytes of %d)", len(all), f.Size())
			}
			err = f.CheckUnchanged()
			var ce *ChangedError
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckUnchanged on an untouched file: %v", err)
			case tc.want != "" && (!errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path)):
				t.Fatalf("CheckUnchanged = %v; want a ChangedError naming %s and saying %q", err, path, tc.want)
			}
		})
	}
}

func writeTiny(t *testing.T, path string, fill byte) {
	t.Helper()
	data := []byte{fill, fill, fill, fill}
	if err := WriteFile(path, []Tensor{{Name: "a", DType: BF16, Shape: []int64{2}, Data: data}}, nil); err != nil {
		t.Fatal(err)
	}
}

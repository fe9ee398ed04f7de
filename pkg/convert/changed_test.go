package convert

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// probe C7: a shard replaced between the header parse and the data read
// was converted at the old offsets, and the receipt blessed the result.
// Every change to a shard after its header is validated fails the
// conversion, naming the shard, and leaves no install or receipt behind.
func TestShardChangedDuringConversionIsRefused(t *testing.T) {
	const shard = "model-00004-of-00004.safetensors"
	replace := func(t *testing.T, path string, data []byte) {
		tmp := filepath.Join(filepath.Dir(path), ".replacement")
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	rewriteInPlace := func(t *testing.T, path string, edit func([]byte) []byte) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // past the filesystem's timestamp granularity
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(edit(data), 0); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		change func(t *testing.T, path string)
		want   string
	}{
		{"replaced with its header padded by 8 bytes (the probe's repro)", func(t *testing.T, path string) {
			b, _ := os.ReadFile(path)
			n := binary.LittleEndian.Uint64(b)
			padded := binary.LittleEndian.AppendUint64(nil, n+8)
			padded = append(padded, b[8:8+n]...)
			padded = append(padded, "        "...)
			replace(t, path, append(padded, b[8+n:]...))
		}, "replaced by another file"},
		{"replaced with identical bytes", func(t *testing.T, path string) {
			b, _ := os.ReadFile(path)
			replace(t, path, b)
		}, "replaced by another file"},
		{"grown in place (size no longer the header's data end)", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(make([]byte, 64))
			f.Close()
		}, "data region ends at byte"},
		{"rewritten in place with other tensor bytes", func(t *testing.T, path string) {
			rewriteInPlace(t, path, func(b []byte) []byte {
				b[len(b)-1] ^= 0xff
				return b
			})
		}, "modified"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := embeddedSnapshot(t)
			target := filepath.Join(src, shard)
			hit := false
			testHookShardOpened = func(path string) {
				if path == target {
					hit = true
					tc.change(t, path)
				}
			}
			defer func() { testHookShardOpened = nil }()
			parent := t.TempDir()
			_, err := Run(context.Background(), Options{Input: src, Targets: []Target{{4, filepath.Join(parent, "out")}}, Threads: 2})
			if !hit {
				t.Fatalf("the converter never opened %s", target)
			}
			if err == nil {
				t.Fatal("the conversion succeeded over a shard that changed while it was read")
			}
			for _, w := range []string{target, "changed while it was being converted", "rerun when it is no longer being written", tc.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			assertNoLeftovers(t, parent)
		})
	}
}

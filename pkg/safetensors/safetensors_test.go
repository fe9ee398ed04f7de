package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/limits"
)

func TestRoundTrip(t *testing.T) {
	tensors := []Tensor{
		{Name: "w", DType: BF16, Shape: []int64{2, 3}, Data: seq(12)},
		{Name: "empty", DType: F32, Shape: []int64{4, 0}, Data: nil},
		{Name: "scalar", DType: F64, Shape: []int64{}, Data: seq(8)},
		{Name: "mask", DType: BOOL, Shape: []int64{3}, Data: []byte{1, 0, 1}},
		{Name: "ids <&>", DType: I64, Shape: []int64{1, 1, 1}, Data: seq(8)},
		{Name: "odd", DType: U16, Shape: []int64{1}, Data: seq(2)},
	}
	meta := map[string]string{"format": "pt", "note": "ünïcode"}
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteFile(path, tensors, meta); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := f.Header()
	if h.DataOffset%8 != 0 {
		t.Errorf("DataOffset = %d, want a multiple of 8", h.DataOffset)
	}
	if len(h.Metadata) != 2 || h.Metadata["note"] != "ünïcode" {
		t.Errorf("Metadata = %v, want %v", h.Metadata, meta)
	}
	if len(h.Tensors) != len(tensors) {
		t.Fatalf("got %d tensors, want %d", len(h.Tensors), len(tensors))
	}
	for i, want := range tensors {
		// With an empty tensor in the middle, Begin order may put it first; look up by name.
		got, ok := f.Tensor(want.Name)
		if !ok {
			t.Fatalf("tensor %q missing", want.Name)
		}
		if got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || got.Size() != int64(len(want.Data)) {
			t.Errorf("tensor %d: got %+v, want %s %v (%d bytes)", i, got, want.DType, want.Shape, len(want.Data))
		}
		buf := make([]byte, got.Size())
		if err := f.ReadTensor(got, buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, want.Data) && len(want.Data) > 0 {
			t.Errorf("tensor %q: read %v, want %v", want.Name, buf, want.Data)
		}
		sec, err := io.ReadAll(f.Section(got))
		if err != nil || !bytes.Equal(sec, buf) {
			t.Errorf("Section(%q) = %v, %v; want %v", want.Name, sec, err, buf)
		}
	}
	if f.Path() != path {
		t.Errorf("Path() = %q, want %q", f.Path(), path)
	}
	for i := 1; i < len(h.Tensors); i++ {
		if h.Tensors[i].Begin < h.Tensors[i-1].Begin {
			t.Errorf("Tensors not sorted by Begin: %v", h.Tensors)
		}
	}
	if f.Header().Tensors[0].NumElements() != 6 || (TensorInfo{Shape: []int64{}}).NumElements() != 1 {
		t.Errorf("NumElements wrong")
	}
}

func TestReadTensorRefusesForeignOrShortBuffer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteFile(path, []Tensor{{Name: "a", DType: U8, Shape: []int64{4}, Data: seq(4)}}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, _ := f.Tensor("a")
	if err := f.ReadTensor(a, make([]byte, 3)); err == nil {
		t.Error("ReadTensor with a 3-byte buffer for a 4-byte tensor succeeded")
	}
	if err := f.ReadTensor(TensorInfo{Name: "a", Begin: 1, End: 5}, make([]byte, 4)); err == nil {
		t.Error("ReadTensor with a range that is not the file's succeeded")
	}
}

func TestWriterMisuse(t *testing.T) {
	specs := []TensorSpec{{Name: "a", DType: U8, Shape: []int64{2}}, {Name: "b", DType: F32, Shape: []int64{1}}}
	cases := []struct {
		name string
		run  func(w *Writer) error
		want string
	}{
		{"out of order", func(w *Writer) error { return w.WriteTensor("b", seq(4)) }, `"b" written where "a"`},
		{"wrong size", func(w *Writer) error { return w.WriteTensor("a", seq(3)) }, "got 3 bytes"},
		{"missing at close", func(w *Writer) error { w.WriteTensor("a", seq(2)); return w.Close() }, `"b" is missing`},
		{"extra", func(w *Writer) error {
			w.WriteTensor("a", seq(2))
			w.WriteTensor("b", seq(4))
			return w.WriteTensor("c", nil)
		}, "after all 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := NewWriter(io.Discard, specs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.run(w); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	bad := []struct {
		name  string
		specs []TensorSpec
		want  string
	}{
		{"duplicate", []TensorSpec{{"a", U8, nil}, {"a", U8, nil}}, "declared twice"},
		{"f8", []TensorSpec{{"a", "F8_E4M3", []int64{1}}}, "convert the checkpoint to bf16"},
		{"unknown", []TensorSpec{{"a", "Q4", []int64{1}}}, `unknown dtype "Q4"`},
		{"reserved", []TensorSpec{{"__metadata__", U8, nil}}, "reserved"},
		{"negative", []TensorSpec{{"a", U8, []int64{-1}}}, "negative"},
		{"rank", []TensorSpec{{"a", U8, make([]int64, limits.MaxTensorRank+1)}}, "rank"},
		{"overflow", []TensorSpec{{"a", F64, []int64{1 << 31, 1 << 31}}}, "exceed"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if _, err := NewWriter(io.Discard, c.specs, nil); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestWriteFileLeavesNothingOnError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.safetensors")
	err := WriteFile(path, []Tensor{{Name: "a", DType: U8, Shape: []int64{2}, Data: seq(1)}}, nil)
	if err == nil {
		t.Fatal("WriteFile with short data succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("directory holds %v after a failed WriteFile, want nothing", entries)
	}
}

// rawFile assembles a safetensors file from a literal header and dataLen data bytes.
func rawFile(header string, dataLen int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, dataLen)...)
}

func withLength(n uint64, rest string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
}

func TestParseHeaderHostile(t *testing.T) {
	const ok = `{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"empty file", nil, "too short"},
		{"truncated length", []byte{1, 2, 3}, "too short"},
		{"length past EOF", withLength(100, "{}"), "runs past the end"},
		{"length over ceiling", withLength(limits.SafetensorsHeader+1, "{}"), "ceiling"},
		{"length huge", withLength(1<<63, "{}"), "ceiling"},
		{"bad json", rawFile(`{"a":`, 0), "unexpected EOF"},
		{"bad json top", rawFile(`{,}`, 0), "invalid header JSON"},
		{"entry not object", rawFile(`{"a":1}`, 0), "expected a JSON object"},
		{"not an object", rawFile(`[1]`, 0), "does not start with '{'"},
		{"leading space", rawFile(` {}`, 0), "does not start with '{'"},
		{"garbage after object", rawFile(`{}x`, 0), "after the header"},
		{"invalid utf8", rawFile("{\"\xff\":1}", 0), "UTF-8"},
		{"duplicate tensor", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), "appears twice"},
		{"duplicate field", rawFile(`{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), "appears twice"},
		{"metadata not string", rawFile(`{"__metadata__":{"n":1}}`, 0), "not a string"},
		{"metadata not object", rawFile(`{"__metadata__":[]}`, 0), "__metadata__"},
		{"missing dtype", rawFile(`{"a":{"shape":[1],"data_offsets":[0,1]}}`, 1), "missing dtype"},
		{"missing shape", rawFile(`{"a":{"dtype":"U8","data_offsets":[0,1]}}`, 1), "missing shape"},
		{"three offsets", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, 1), "data_offsets must be"},
		{"fractional dim", rawFile(`{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}`, 1), "shape"},
		{"negative dim", rawFile(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, 1), "negative"},
		{"end before begin", rawFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[2,1]}}`, 2), "invalid data_offsets"},
		{"past data region", rawFile(ok, 1), "run past"},
		{"trailing bytes", rawFile(ok, 3), "1 trailing bytes"},
		{"gap", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`, 3), "unclaimed bytes"},
		{"gap at start", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), "unclaimed bytes"},
		{"overlap", rawFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 3), "overlaps"},
		{"same range twice", rawFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, 2), "overlaps"},
		{"shape mismatch", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), "needs 8 bytes"},
		{"shape overflow", rawFile(`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0), "63 bits"},
		{"bytes overflow", rawFile(`{"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}}`, 0), "too large"},
		{"dim past int64", rawFile(`{"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}}`, 0), "shape"},
		{"rank", rawFile(`{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}`, 1), "rank 9"},
		{"f8", rawFile(`{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}`, 1), "8-bit float tensors are not supported; convert the checkpoint to bf16 first"},
		{"f8 e5m2", rawFile(`{"a":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[0,1]}}`, 1), "8-bit float"},
		{"unknown dtype", rawFile(`{"a":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]}}`, 1), `unknown dtype "Q4_K"`},
		{"no tensors but data", rawFile(`{}`, 8), "trailing bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseHeader(bytes.NewReader(c.file), int64(len(c.file)), "bad.safetensors")
			if err == nil {
				t.Fatalf("ParseHeader accepted %q", c.file)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.safetensors") {
				t.Errorf("error %q, want it to name the file and contain %q", err, c.want)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Errorf("error %T is not a *FormatError", err)
			}
		})
	}
}

func TestParseHeaderAccepts(t *testing.T) {
	cases := []struct {
		name    string
		file    []byte
		tensors int
	}{
		{"empty", rawFile(`{}`, 0), 0},
		{"padded", rawFile(`{}      `, 0), 0},
		{"null metadata", rawFile(`{"__metadata__":null}`, 0), 0},
		{"unknown field ignored", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[{}]}}`, 1), 1},
		{"empty tensors share offsets", rawFile(`{"e":{"dtype":"F32","shape":[0,3],"data_offsets":[1,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"z":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}}`, 2), 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, err := ParseHeader(bytes.NewReader(c.file), int64(len(c.file)), "ok.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			if len(h.Tensors) != c.tensors {
				t.Errorf("got %d tensors, want %d", len(h.Tensors), c.tensors)
			}
			checkInvariants(t, h, int64(len(c.file)))
		})
	}
}

func TestFixtureShards(t *testing.T) {
	dir := testfix.Dev(t, "tiny-moe-fused")
	shards, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil || len(shards) != 5 {
		t.Fatalf("found shards %v (%v), want 5", shards, err)
	}
	want := map[string]struct {
		dtype DType
		shape []int64
	}{
		"lm_head.weight": {BF16, []int64{4160, 128}},
		"model.language_model.layers.0.linear_attn.conv1d.weight": {BF16, []int64{256, 1, 4}},
		"model.language_model.layers.3.self_attn.q_proj.weight":   {BF16, []int64{256, 128}},
		"model.language_model.layers.0.mlp.experts.gate_up_proj":  {BF16, []int64{16, 128, 128}},
		"model.language_model.layers.0.mlp.experts.down_proj":     {BF16, []int64{16, 128, 64}},
		"model.language_model.embed_tokens.weight":                {BF16, []int64{4160, 128}},
		"mtp.fc.weight": {BF16, []int64{128, 256}},
	}
	found := 0
	for _, p := range shards {
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if f.Header().Metadata["format"] != "pt" {
			t.Errorf("%s: metadata %v, want format=pt", p, f.Header().Metadata)
		}
		st, _ := os.Stat(p)
		checkInvariants(t, f.Header(), st.Size())
		for name, w := range want {
			ti, ok := f.Tensor(name)
			if !ok {
				continue
			}
			found++
			if ti.DType != w.dtype || !slices.Equal(ti.Shape, w.shape) {
				t.Errorf("%s: %s %v, want %s %v", name, ti.DType, ti.Shape, w.dtype, w.shape)
			}
			buf := make([]byte, ti.Size())
			if err := f.ReadTensor(ti, buf); err != nil {
				t.Error(err)
			}
		}
		f.Close()
	}
	if found != len(want) {
		t.Errorf("found %d of the %d expected tensors", found, len(want))
	}
}

// checkInvariants asserts everything ParseHeader promises about an accepted header.
func checkInvariants(t *testing.T, h *Header, size int64) {
	t.Helper()
	if h.DataOffset < 8 || h.DataOffset > size || h.DataOffset-8 > limits.SafetensorsHeader {
		t.Fatalf("DataOffset %d out of range for a %d-byte file", h.DataOffset, size)
	}
	names := map[string]bool{}
	var next int64
	for _, ti := range h.Tensors {
		if names[ti.Name] || ti.Name == metadataKey {
			t.Fatalf("bad or duplicate name %q", ti.Name)
		}
		names[ti.Name] = true
		if ti.DType.Size() == 0 || len(ti.Shape) > limits.MaxTensorRank {
			t.Fatalf("tensor %q: dtype %q rank %d accepted", ti.Name, ti.DType, len(ti.Shape))
		}
		n, err := numElements(ti.Shape)
		if err != nil {
			t.Fatalf("tensor %q: %v", ti.Name, err)
		}
		if want, ok := mulInt64(n, int64(ti.DType.Size())); !ok || want != ti.Size() {
			t.Fatalf("tensor %q: %d bytes for shape %v %s", ti.Name, ti.Size(), ti.Shape, ti.DType)
		}
		if ti.Begin != next {
			t.Fatalf("tensor %q begins at %d, previous ended at %d", ti.Name, ti.Begin, next)
		}
		next = ti.End
	}
	if h.DataOffset+next != size {
		t.Fatalf("tensors end at %d, file is %d bytes", h.DataOffset+next, size)
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add(rawFile(`{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`, 8))
	f.Add(rawFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 3))
	f.Fuzz(func(t *testing.T, file []byte) {
		h, err := ParseHeader(bytes.NewReader(file), int64(len(file)), "fuzz.safetensors")
		if err != nil {
			return
		}
		checkInvariants(t, h, int64(len(file)))
	})
}

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i + 1)
	}
	return b
}

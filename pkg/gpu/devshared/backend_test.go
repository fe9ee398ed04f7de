package devshared

import (
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
)

func TestSessionKVBits(t *testing.T) {
	for _, tc := range []struct {
		in, want int
		err      string
	}{
		{0, model.DefaultKVBits, ""},
		{8, 8, ""}, {16, 16, ""}, {32, 32, ""},
		{12, 0, "qwen38gpu: KV cache width 12 bits: use 8, 16 or 32"},
	} {
		got, err := SessionKVBits("qwen38gpu", tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%d bits: got %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%d bits: got %d, %v, want %d", tc.in, got, err, tc.want)
		}
	}
}

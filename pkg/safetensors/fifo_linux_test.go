package safetensors

import (
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
)

// probe C9: Open refuses a FIFO at once instead of blocking in open(2).
func TestOpenRefusesFIFOWithoutBlocking(t *testing.T) {
	testfix.RefusesFIFO(t, "model.safetensors", "Open", func(p string) error {
		f, err := Open(p)
		if err == nil {
			f.Close()
		}
		return err
	})
}

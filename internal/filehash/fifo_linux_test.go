package filehash

import (
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
)

// probe C9: hashing a FIFO put where a payload belongs is refused at once.
func TestSHA256RefusesFIFOWithoutBlocking(t *testing.T) {
	testfix.RefusesFIFO(t, "resident.bin", "SHA256", func(p string) error {
		_, _, err := SHA256(p)
		return err
	})
}

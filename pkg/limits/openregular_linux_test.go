package limits

import (
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
)

// probe C9: a FIFO at manifest.json hung every reader in open(2), past
// Ctrl-C. It must be refused at once, naming the file.
func TestReadFileRefusesFIFOWithoutBlocking(t *testing.T) {
	testfix.RefusesFIFO(t, "manifest.json", "ReadFile", func(p string) error {
		_, err := ReadFile(p, 1<<20)
		return err
	})
}

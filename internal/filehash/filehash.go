// Package filehash streams files through sha256: the one implementation the
// snapshot reader, the receipt writer and the verifier share.
package filehash

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// SHA256 returns the size and the lowercase hex sha256 of the file at path.
func SHA256(path string) (size int64, sum string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

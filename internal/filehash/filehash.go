// Package filehash streams files through sha256: the one implementation the
// snapshot reader, the receipt writer and the verifier share.
package filehash

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/nvmai/nvmai/pkg/limits"
)

// SHA256 returns the size and the lowercase hex sha256 of the file at path.
func SHA256(path string) (size int64, sum string, err error) {
	return SHA256Context(context.Background(), path)
}

// SHA256Context is SHA256, checking ctx between blocks so that hashing a
// large file stops promptly on Ctrl-C; it then returns ctx's error. Only a
// regular file is hashed: a FIFO or device is refused without blocking.
func SHA256Context(ctx context.Context, path string) (size int64, sum string, err error) {
	f, _, err := limits.OpenRegular(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, ContextReader(ctx, f), make([]byte, 1<<20))
	if ctx.Err() != nil {
		return 0, "", ctx.Err()
	}
	if err != nil {
		return 0, "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// ContextReader reads r but fails its next Read with ctx's error once ctx
// is done, so that hashing a large file stops promptly on Ctrl-C.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

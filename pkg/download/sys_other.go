//go:build !unix

package download

import (
	"errors"
	"math"
	"os"
)

const oNoFollow = 0

// lockFile is a no-op where flock is unavailable; the final hash check still
// keeps blobs correct.
func lockFile(*os.File) error { return nil }

// statfsFree cannot measure free space here; the preflight then passes and
// a full disk surfaces as a write error.
func statfsFree(string) (uint64, error) { return math.MaxUint64, errors.ErrUnsupported }

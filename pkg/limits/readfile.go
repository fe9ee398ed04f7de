package limits

import (
	"fmt"
	"io"
)

// TooLargeError reports a file over the ceiling its format allows.
type TooLargeError struct {
	Path  string
	Size  int64 // bytes seen (at least Limit+1 when it grew while being read)
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: %d bytes is over the %d-byte ceiling for this file", e.Path, e.Size, e.Limit)
}

// ReadFile reads a whole regular file of at most limit bytes. The size is
// checked before anything is allocated and again while reading, in case the
// file grows underneath us, so a hostile file cannot make a reader allocate
// more than its format allows. Links are followed; a FIFO or device is
// refused without blocking (see OpenRegular).
func ReadFile(path string, limit int64) ([]byte, error) {
	f, st, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, &TooLargeError{path, st.Size(), limit}
	}
	buf, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(buf)) > limit {
		return nil, &TooLargeError{path, int64(len(buf)), limit}
	}
	return buf, nil
}

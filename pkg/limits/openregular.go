package limits

import (
	"fmt"
	"os"
	"syscall"
)

// OpenRegular opens path for reading and returns it with its FileInfo, or
// refuses it unless it is a regular file (links followed). The open itself
// is non-blocking: opening a FIFO for reading otherwise waits in the kernel
// until a writer appears, where neither Ctrl-C nor SIGTERM can reach it (the
// Go runtime catches them and the blocked open never returns). Regular files
// ignore the flag. The check is on the opened descriptor, so a file swapped
// for a FIFO between a check and the open is still refused.
func OpenRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s: not a regular file (mode %v); replace it with the file itself", path, st.Mode())
	}
	return f, st, nil
}

//go:build !linux

package collector

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// maxFileSize bounds what readFileInto reads.
const maxFileSize = 16 << 20

// readFileInto appends the contents of the file at path to buf, reading
// until EOF (tests run against fixture trees on any OS).
func readFileInto(buf []byte, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	start := len(buf)
	for {
		if len(buf) == cap(buf) {
			if len(buf)-start >= maxFileSize {
				return buf, fmt.Errorf("read %s: larger than %d bytes", path, maxFileSize)
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				return buf, nil
			}
			return buf, fmt.Errorf("read %s: %w", path, err)
		}
	}
}

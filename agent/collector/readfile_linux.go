package collector

import (
	"os"
	"syscall"
)

// maxFileSize bounds what readFileInto reads, so a ProcRoot or SysRoot
// pointing at something endless cannot exhaust memory.
const maxFileSize = 16 << 20

// readFileInto appends the contents of the file at path to buf. procfs files
// report size 0, so it reads until EOF, growing buf as needed. It uses the
// system calls directly: os.Open would register each file with the runtime
// poller, a third of the cost of reading a small /proc file.
func readFileInto(buf []byte, path string) ([]byte, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return buf, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	start := len(buf)
	for {
		if len(buf) == cap(buf) {
			if len(buf)-start >= maxFileSize {
				return buf, &os.PathError{Op: "read", Path: path, Err: syscall.EFBIG}
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return buf, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n <= 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

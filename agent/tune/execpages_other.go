//go:build !linux

package tune

import "errors"

func ReleaseExecPages() (before, after int64, err error) {
	return 0, 0, errors.New("releasing the executable's pages is implemented for Linux only")
}

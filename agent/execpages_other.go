//go:build !linux

package agent

import "errors"

func releaseExecPages() (before, after int64, err error) {
	return 0, 0, errors.New("releasing the executable's pages is implemented for Linux only")
}

//go:build !linux

package tune

import (
	"errors"
	"time"
)

func SetMonitorSlack(time.Duration) (int, error) {
	return 0, errors.New("timer slack is a Linux setting")
}

//go:build !linux

package agent

import (
	"errors"
	"time"
)

func setMonitorSlack(time.Duration) (int, error) {
	return 0, errors.New("timer slack is a Linux setting")
}

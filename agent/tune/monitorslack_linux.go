package tune

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"
)

// SetMonitorSlack sets the timer slack of the runtime's monitor thread
// (monitorslack.go) and returns that thread's id. Without CAP_SYS_NICE it
// fails with an error that wraps fs.ErrPermission.
func SetMonitorSlack(slack time.Duration) (int, error) {
	tid, err := monitorThread()
	if err != nil {
		return 0, err
	}
	path := fmt.Sprintf("/proc/%d/timerslack_ns", tid)
	if err := os.WriteFile(path, []byte(strconv.FormatInt(slack.Nanoseconds(), 10)), 0); err != nil {
		return tid, fmt.Errorf("cannot set the timer slack of thread %d: %w", tid, err)
	}
	return tid, nil
}

// monitorThread is the lowest thread id of this process above its
// process id.
func monitorThread() (int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, fmt.Errorf("cannot list the process's threads: %w", err)
	}
	pid := os.Getpid()
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid > pid {
			tids = append(tids, tid)
		}
	}
	if len(tids) == 0 {
		return 0, fmt.Errorf("no thread of process %d has a higher id than the process", pid)
	}
	return slices.Min(tids), nil
}

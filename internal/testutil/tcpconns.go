package testutil

import (
	"os"
	"strconv"
	"strings"
)

// EstablishedTo counts the established IPv4 TCP connections of this
// machine (network namespace) whose local port is port, which for a
// listening port are the connections it accepted, from /proc/net/tcp.
func EstablishedTo(port int) (int, error) {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "01" { // 01: ESTABLISHED
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
			n++
		}
	}
	return n, nil
}

//go:build unix

package broker

import "syscall"

// minOpenFiles is the open-file limit below which the broker warns at
// start. Every client connection holds a descriptor, and every partition
// replica its segment files and its raft log: a cluster of a few thousand
// agents (each connected to every broker) and a few thousand partitions
// needs tens of thousands. deploy/ raises the limit to 1,048,576.
const minOpenFiles = 65536

// logOpenFileLimit says at start how many files the broker may open, and
// warns when that is fewer than minOpenFiles: past the limit, accepting a
// connection or opening a segment fails with "too many open files". The
// Go runtime has already raised the soft limit to the hard one, so what
// is logged is what the broker gets.
func (b *Broker) logOpenFileLimit() {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.log.Warn("cannot read the open file limit", "err", err)
		return
	}
	if lim.Cur < minOpenFiles {
		b.log.Warn("open file limit is low: each client connection and each partition's segment and raft files take one; raise it (ulimit -n, systemd LimitNOFILE)",
			"limit", lim.Cur, "hard_limit", lim.Max, "want_at_least", minOpenFiles)
		return
	}
	b.log.Info("open file limit", "limit", lim.Cur)
}

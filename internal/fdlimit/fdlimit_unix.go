//go:build unix

package fdlimit

import (
	"log/slog"
	"syscall"
)

// Log says how many files the process may open, and warns when that is
// fewer than want: past the limit, accepting a connection or opening a
// file fails with "too many open files". uses says what takes the files,
// for the warning. The Go runtime has already raised the soft limit to the
// hard one, so what is logged is what the process gets.
func Log(log *slog.Logger, want uint64, uses string) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("cannot read the open file limit", "err", err)
		return
	}
	if uint64(lim.Cur) < want {
		log.Warn("open file limit is low: "+uses+"; raise it (ulimit -n, systemd LimitNOFILE)",
			"limit", lim.Cur, "hard_limit", lim.Max, "want_at_least", want)
		return
	}
	log.Info("open file limit", "limit", lim.Cur)
}

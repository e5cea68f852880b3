//go:build !unix

package fdlimit

import "log/slog"

// Log has nothing to check where there is no RLIMIT_NOFILE.
func Log(*slog.Logger, uint64, string) {}

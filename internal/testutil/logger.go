package testutil

import (
	"log/slog"
	"os"
)

// LogEnv, when set, makes Logger write debug logs to stderr.
const LogEnv = "SIMTEL_TEST_LOG"

// Logger is the logger for the components a test runs in its process: it
// discards everything unless $SIMTEL_TEST_LOG is set, so a failing test can
// be rerun with the whole log.
func Logger() *slog.Logger {
	if os.Getenv(LogEnv) != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

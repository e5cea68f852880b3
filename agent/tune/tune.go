package tune

import (
	"log/slog"
	"os"
	"time"
)

// Config says which tunings to apply; the zero value applies none.
type Config struct {
	// MaxProcs, if above 0, makes StartProcs use one Go processor while
	// samples arrive slowly and up to MaxProcs when they arrive fast.
	MaxProcs int
	// ReleaseExecPages makes AfterStart give back the executable's
	// start-up pages.
	ReleaseExecPages bool
	// MonitorSlack, if above 0, is the timer slack AfterStart gives the
	// runtime's monitor thread.
	MonitorSlack time.Duration
	// Logger receives what was done or could not be. Required.
	Logger *slog.Logger
}

// StartProcs returns the governor of the Go processors, or nil (which
// does nothing) when cfg.MaxProcs is 0 or GOMAXPROCS is set in the
// environment, which it then keeps.
func StartProcs(cfg Config) *Procs {
	if cfg.MaxProcs <= 0 {
		return nil
	}
	if os.Getenv("GOMAXPROCS") != "" {
		cfg.Logger.Info("GOMAXPROCS is set in the environment: the agent keeps it instead of adapting its Go processors to the rate (--max-procs)")
		return nil
	}
	return NewProcs(cfg.MaxProcs, cfg.Logger, time.Now())
}

// AfterStart releases the executable's start-up pages and raises the
// monitor thread's timer slack, as cfg asks. Neither is needed for the
// agent to work: a failure is logged and the agent goes on.
func AfterStart(cfg Config) {
	if cfg.ReleaseExecPages {
		// Everything that runs only at start has run: give its pages of
		// the executable back (execpages.go).
		before, after, err := ReleaseExecPages()
		if err != nil {
			cfg.Logger.Warn("cannot release the executable's start-up pages; the agent works, with a larger resident size", "err", err)
		} else {
			cfg.Logger.Debug("released the executable's start-up pages", "resident_kib_before", before, "resident_kib_after", after)
		}
	}
	if cfg.MonitorSlack > 0 {
		if tid, err := SetMonitorSlack(cfg.MonitorSlack); err != nil {
			cfg.Logger.Info("the runtime's monitor thread keeps its default timer slack (raising it needs CAP_SYS_NICE; the agent then costs a little more CPU)", "err", err)
		} else {
			cfg.Logger.Debug("raised the timer slack of the runtime's monitor thread", "tid", tid, "slack", cfg.MonitorSlack)
		}
	}
}

package main

import (
	"fmt"
	"io"
	"log/slog"
	"log/syslog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/slurm"
)

func newSlurmCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "slurm",
		Short: "Slurm hooks: publish job lifecycle events from Prolog, Epilog and jobcomp",
		Long: `Slurm hooks that publish job lifecycle events to the "jobs" topic and keep
the run registry ("runs" topic, see ` + "`simtel runs`" + `) up to date.

In slurm.conf (each hook is a two-line wrapper script, since Slurm passes no
arguments):

  PrologFlags=Alloc
  Prolog=/usr/local/libexec/simtel/prolog     # exec simtel slurm prolog
  Epilog=/usr/local/libexec/simtel/epilog     # exec simtel slurm epilog
  JobCompType=jobcomp/script                  # optional, on the controller:
  JobCompLoc=/usr/local/libexec/simtel/jobcomp  # exec simtel slurm jobcomp

The broker list comes from --brokers, SIMTEL_BROKERS, or SIMTEL_BROKERS in
--env-file (default /etc/simtel/slurm.env), and so do the security settings
(--security-protocol, SIMTEL_SECURITY_PROTOCOL in the file, ...). A hook never fails the job:
whatever happens it exits 0 within --timeout, and a failure is logged to
stderr, syslog (tag simtel-slurm) and --log-file.`,
	}
	for _, h := range []struct{ kind, short, long string }{
		{slurm.HookProlog, "Prolog hook: node_up from every node, submitted and started from the batch host",
			"Run as slurm.conf's Prolog= with PrologFlags=Alloc. Every node sends node_up; the\nbatch host also sends submitted and started with Slurm's times."},
		{slurm.HookEpilog, "Epilog hook: node_down from every node, the job's end from the batch host",
			"Run as slurm.conf's Epilog=. Every node sends node_down; the batch host sends\ncompleted, failed or cancelled, inferred from the job's exit code (Slurm shows\nan epilog only COMPLETING: configure the jobcomp hook for Slurm's own state)."},
		{slurm.HookJobComp, "Job completion hook: the job's final state as Slurm recorded it",
			"Run as slurm.conf's JobCompLoc= with JobCompType=jobcomp/script, on the\ncontroller. Sends submitted, started and the final event with Slurm's JobState\n(COMPLETED, CANCELLED, FAILED, TIMEOUT, …), which wins over the epilog's."},
	} {
		cmd.AddCommand(newSlurmHookCmd(g, h.kind, h.short, h.long))
	}
	return cmd
}

func newSlurmHookCmd(g *globalFlags, kind, short, long string) *cobra.Command {
	var cfg slurm.HookConfig
	var brokers, envFile, logFile string
	var sec clientSecFlags
	cmd := &cobra.Command{
		Use:   kind,
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, closeLog := hookLogger(g, logFile)
			defer closeLog()
			vars, err := slurm.ReadEnvFile(envFile)
			if err != nil {
				log.Error("slurm hook cannot read its config; no job event sent", "hook", kind, "err", err)
				return nil
			}
			if !cmd.Flags().Changed("brokers") && vars["SIMTEL_BROKERS"] != "" {
				brokers = vars["SIMTEL_BROKERS"]
			}
			if !cmd.Flags().Changed("timeout") && vars["SIMTEL_TIMEOUT"] != "" {
				if d, err := time.ParseDuration(vars["SIMTEL_TIMEOUT"]); err == nil {
					cfg.Timeout = d
				}
			}
			cfg.Brokers = splitList(brokers)
			cfg.Logger = log
			if err = sec.fromVars(cmd.Flags(), vars); err == nil {
				cfg.ClientOpts, err = sec.opts()
			}
			if err != nil {
				log.Error("slurm hook cannot use its security settings; no job event sent", "hook", kind, "err", err)
				return nil
			}
			start := time.Now()
			if err := slurm.RunHook(cmd.Context(), kind, cfg); err != nil {
				// Exit 0 anyway: a failing prolog drains the node and
				// requeues the job; telemetry must never do that.
				log.Error("slurm hook failed; job event not sent", "hook", kind, "job", os.Getenv("SLURM_JOB_ID")+os.Getenv("JOBID"),
					"node", os.Getenv("SLURMD_NODENAME"), "took", time.Since(start).Round(time.Millisecond), "err", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "brokers", "", "comma-separated broker addresses (default: SIMTEL_BROKERS from --env-file)")
	f.StringVar(&envFile, "env-file", "/etc/simtel/slurm.env", "KEY=VALUE file with SIMTEL_BROKERS (and SIMTEL_TIMEOUT and the security settings, SIMTEL_SECURITY_PROTOCOL...)")
	sec.register(f)
	f.StringVar(&logFile, "log-file", "", "also append log lines to this file")
	f.DurationVar(&cfg.Timeout, "timeout", 5*time.Second, "give up after this long (the hook still exits 0)")
	f.StringVar(&cfg.Scontrol, "scontrol", "scontrol", "scontrol binary, to read the job's details")
	return cmd
}

// hookLogger logs to stderr, syslog when there is one, and logFile when
// set; a hook must leave a trace somewhere an admin looks.
func hookLogger(g *globalFlags, logFile string) (*slog.Logger, func()) {
	ws := []io.Writer{os.Stderr}
	var closers []io.Closer
	if sl, err := syslog.New(syslog.LOG_NOTICE|syslog.LOG_DAEMON, "simtel-slurm"); err == nil {
		ws = append(ws, sl)
		closers = append(closers, sl)
	}
	if logFile != "" {
		if f, err := os.OpenFile(logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			ws = append(ws, f)
			closers = append(closers, f)
		} else {
			fmt.Fprintf(os.Stderr, "simtel: cannot open --log-file %s: %v\n", logFile, err)
		}
	}
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(g.logLevel))
	h := slog.NewTextHandler(teeWriter(ws), &slog.HandlerOptions{Level: lvl})
	return slog.New(h), func() {
		for _, c := range closers {
			c.Close()
		}
	}
}

// teeWriter writes to every writer, whatever fails: a dead syslog socket
// must not cost the log file its line.
type teeWriter []io.Writer

func (t teeWriter) Write(p []byte) (int, error) {
	for _, w := range t {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

package tune

// The Go runtime's monitor thread (sysmon) wakes every 20 µs while any
// goroutine runs or sits in a system call, backing off only after about
// fifty wake-ups without work; the first system call after an idle spell
// starts it at 20 µs again. An agent at a few thousand samples a second
// is busy in short bursts, so the monitor's wake-ups are a large part of
// what a burst costs.
//
// Linux lets a thread's timers be late by its timer slack (50 µs by
// default), so that the kernel can wake it together with other timers.
// SetMonitorSlack raises the monitor thread's slack (Config.MonitorSlack):
// its sleeps within a burst become fewer and longer, and nothing the agent
// does needs the monitor sooner (it takes a processor back from a thread
// blocked in a system call, or preempts a goroutine that ran for 10 ms).
// Only that thread changes: the agent's own timers (lingers, gathering
// windows, retries) keep the default slack (docs/agent-cost.md, "CPU").
// Reproduce: bench/agent-ab.sh A B, B a wrapper adding --monitor-slack 0.
//
// The monitor is the first thread the runtime starts after the main one
// (runtime.main starts it before any package initialisation), so it has
// the lowest thread id above the process id. If that were ever not so,
// another thread's timers would be up to the slack late, which the agent
// does not notice. Setting another thread's slack needs CAP_SYS_NICE;
// without it the agent runs with the default slack.

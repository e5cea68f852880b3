// Package collector reads a compute node's metrics — CPU, memory, load,
// network, disks, the Slurm job's cgroup and NVIDIA GPUs — and encodes them
// as InfluxDB line protocol, for the agent to ship next to the samples the
// simulations send.
//
// # Using it
//
//  1. Build a Config (flags and SLURM_* variables are parsed in cmd/, not
//     here), call Validate, then New. New does no I/O.
//  2. Call Collect at the collection interval (the agent's ticker), passing
//     a buffer to append to; reuse it between calls. Every line of one call
//     carries the same timestamp, Config.Now() at the start of the call.
//  3. Rates compare a call with the previous one: the first call after New
//     reports totals only, the second and later calls add percentages and
//     per-second rates over the time between the calls.
//  4. Treat an error from Collect as "ctx is done"; no source failing ever
//     makes Collect fail. A source that cannot be read is left out, with one
//     debug log line until it has worked again.
//
// Lines carry no host, run or job tags except slurm_job's job tag: the
// agent adds those to every sample it ships.
//
// # Measurements
//
// Names and fields follow Telegraf's inputs (cpu, mem, system, kernel, net,
// diskio, nvidia_smi) so existing dashboards work. Integer fields are
// encoded as line-protocol integers ("i"), others as floats.
//
//	cpu,cpu=cpu-total|cpu<N>   usage_user usage_nice usage_system usage_idle usage_iowait usage_irq
//	                           usage_softirq usage_steal usage_guest usage_guest_nice (percent, from
//	                           the second call; user and nice exclude guest time as in Telegraf);
//	                           time_* for the same states (seconds since boot)
//	mem                        total available used free cached buffered (bytes; cached includes
//	                           SReclaimable, used = total-free-buffered-cached) used_percent
//	                           available_percent; active inactive slab sreclaimable shared dirty
//	                           write_back swap_total swap_free swap_cached committed_as (bytes)
//	                           huge_pages_total huge_pages_free (pages)
//	system                     load1 load5 load15 n_cpus (online cores) uptime (s)
//	kernel                     boot_time (Unix s) context_switches interrupts processes_forked
//	net,interface=<if>         bytes_recv bytes_sent packets_recv packets_sent err_in err_out drop_in
//	                           drop_out (totals); bytes_recv_per_sec bytes_sent_per_sec
//	                           packets_recv_per_sec packets_sent_per_sec
//	diskio,name=<dev>          reads writes read_bytes write_bytes read_time write_time io_time
//	                           weighted_io_time (ms) iops_in_progress merged_reads merged_writes
//	                           (totals); read_bytes_per_sec write_bytes_per_sec reads_per_sec
//	                           writes_per_sec
//	slurm_job,job=<id>         cpu_usage_seconds cpu_percent (100 = one core busy) memory_usage_bytes
//	                           memory_max_bytes memory_limit_bytes (absent when unlimited)
//	gpu,index=,name=,uuid=     utilization_gpu utilization_memory (percent) memory_used memory_total
//	                           (MiB) temperature_gpu (C) power_draw (W)
//
// By default lo and interfaces that never moved a packet are skipped, and so
// are partitions, loop, ram, zram and floppy devices and devices that never
// did I/O; Config.Interfaces and Config.Devices name exactly what to report
// instead. A counter that went backwards (driver reset, wrap) gets no rate
// for that call.
//
// # Data path and cost
//
// Collect reads /proc/stat, meminfo, loadavg, uptime, net/dev and diskstats
// into one reused buffer with plain open/read/close system calls, parses them
// in place without allocating, and encodes with lineproto.Encoder straight
// into the caller's buffer. Per-interface and per-device state lives in maps
// keyed by name and is dropped when a name disappears. The kernel's cost of
// producing the /proc files dominates (go test -run XXX -bench Collect
// ./agent/collector reports the CPU per call).
//
// The Slurm job's cgroup directory is found once (from /proc/self/cgroup
// when the agent runs inside the job, else by a bounded breadth-first search
// for job_<id> under SysRoot/fs/cgroup) and its few files are read each call.
// nvidia-smi runs once per call with Config.GPUTimeout; a missing binary is
// looked for again after five minutes, and a failing or hung one is backed
// off from 30 s up to 10 minutes.
//
// # Concurrency
//
// A Collector starts no goroutines. One mutex (Collector.mu) serializes
// Collect calls and guards all state; it is the only lock. The nvidia-smi
// child process is started and waited for inside Collect.
package collector

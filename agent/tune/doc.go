// Package tune holds what the agent changes in its own process to cost a
// compute node less. Each setting is the whole process's, so a process
// that embeds the agent (simtel dev, tests) leaves them off:
//
//   - the Go processors (GOMAXPROCS), one at low rates and more at high
//     ones (procs.go);
//   - the timer slack of the Go runtime's monitor thread, so that its
//     polls within a burst of work wake the node less (monitorslack.go);
//   - the pages of the executable that only start-up needed, given back
//     once the agent serves (execpages.go).
//
// The agent calls StartProcs before it starts serving and AfterStart once
// its listeners and producer run. Procs.Add is safe for concurrent use;
// the rest is called from one goroutine.
package tune

//go:build !unix

package broker

// logOpenFileLimit has nothing to check where there is no RLIMIT_NOFILE.
func (b *Broker) logOpenFileLimit() {}

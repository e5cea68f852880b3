//go:build !linux

package agent

import "net"

// newPacketSource reads pc through Go's network poller.
func newPacketSource(pc net.PacketConn, n int) (packetSource, error) {
	return newBatchReader(pc, n), nil
}

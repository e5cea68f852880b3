// Package layering holds the test that keeps the module's packages
// layered: no package depends on one above it, test helpers included.
//
//   - lake/... does not depend on sink/... (the lake reads what the sink
//     wrote, through the schema package both use);
//   - agent/... does not depend on broker/... (an agent ships to any Kafka
//     broker; its tests start `simtel broker` processes with
//     internal/testutil/brokertest, not brokertest/inproc);
//   - broker/... does not depend on agent/..., sink/... or lake/....
//
// The test reads `go list -deps -test`, so an import added to a _test.go
// file or to a test helper package counts as much as one in production
// code.
package layering

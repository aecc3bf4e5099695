// Package conformance holds the tests that hold this project to the official
// Zerobus SDK: the SDK (driven through the node scripts in this directory)
// and our Go client run the same scenarios against a fresh emulator, send the
// same batches to a recording server whose captures are compared, and race
// each other in BenchmarkTransport. See README.md; run `npm ci --prefix
// conformance` first.
package conformance

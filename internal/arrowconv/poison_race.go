//go:build race

package arrowconv

// poisonFreed, in race-detector builds, overwrites column storage as it
// returns to the pool, so that a record read after its last release (a
// missing Retain somewhere downstream) shows up as garbage in that package's
// tests instead of as silently recycled data in production.
const poisonFreed = true

//go:build !race

package arrowconv

// poisonFreed: see poison_race.go.
const poisonFreed = false

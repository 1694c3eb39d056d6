//go:build race

package qlogana_test

// raceDetector: the tests run under the race detector, which slows every goroutine 5-10
// times; bounds on the client's own processing time are not meaningful then.
const raceDetector = true

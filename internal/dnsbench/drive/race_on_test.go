//go:build race

package drive_test

// raceDetector: the tests run under the race detector, whose instrumentation makes
// values escape to the heap that do not otherwise: allocation counts are not the
// program's then.
const raceDetector = true

//go:build !race

package measure_test

// raceDetector: see race_on_test.go.
const raceDetector = false

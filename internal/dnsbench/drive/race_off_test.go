//go:build !race

package drive_test

// raceDetector: see race_on_test.go.
const raceDetector = false

//go:build !race

package qlogana_test

// raceDetector: see race_on_test.go.
const raceDetector = false

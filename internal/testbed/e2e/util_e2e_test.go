package e2e

import (
	"os"
	"strings"
)

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }
func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}
func splitLines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }
func replaceComma(s string) string { return strings.ReplaceAll(s, ",", " ") }

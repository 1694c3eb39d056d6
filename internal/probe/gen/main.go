// Command gen writes the probe payloads under probes/ (run from the repository root:
// go run ./internal/probe/gen). A test checks the committed files equal its output.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/doqscan/doqscan/internal/probe"
)

func main() {
	dir := flag.String("dir", "probes", "directory to write the probe files into")
	flag.Parse()
	names, err := probe.WriteProbes(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	for _, n := range names {
		fmt.Println(n)
	}
}

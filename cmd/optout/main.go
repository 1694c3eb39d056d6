// Command optout serves the opt-out web page on the scanner's own address (who scans,
// why, and a form through which operators exclude their ranges) and reviews its requests
// (list, accept, reject, withdraw). The flags live in internal/optout/command.
package main

import (
	"os"

	"github.com/doqscan/doqscan/internal/optout/command"
)

func main() { os.Exit(command.Main(os.Args[1:], command.IO{Out: os.Stdout, Err: os.Stderr})) }

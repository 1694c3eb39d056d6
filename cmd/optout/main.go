// Command optout serves the opt-out web page on the scanner's own address (who scans,
// why, and a form through which operators exclude their ranges) and reviews its requests
// (list, accept, reject, withdraw). The subcommands and their flags live in
// internal/optout/command.
package main

import (
	"os"

	"github.com/doqscan/doqscan/internal/optout/command"
)

func main() { command.Tool(command.IO{Out: os.Stdout}).Main() }

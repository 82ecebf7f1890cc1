package setting

import (
	"fmt"
	"io"

	"orderpipe/pkg/secret"
)

// MainArgs is the Main of a command whose arguments parse reads: it parses
// them as ParseArgs does, has run do the work with them, and makes what
// either returned the exit status (Exit).
func MainArgs[A any](command, usage string, args []string, parse func([]string) (A, error), stdout, stderr io.Writer, run func(A) error) int {
	a, err := ParseArgs(command, usage, args, parse, stdout, stderr)
	if err == nil {
		err = run(a)
	}
	return Exit(err)
}

// CouldNotRun writes to stderr that command could not run and why, the
// reason scrubbed of secrets, and asks for exit 2: "could not look", which
// a command's exit 1, "looked and refused", must never be confused with.
func CouldNotRun(stderr io.Writer, command string, err error) error {
	fmt.Fprintf(stderr, "%s: could not run: %v\n", command, secret.Scrub(err.Error()))
	return ExitCode(2)
}

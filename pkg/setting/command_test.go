package setting

import (
	"errors"
	"strings"
	"testing"

	"orderpipe/pkg/secret"
)

// TestMainArgs: run gets the parsed arguments and its error is the exit
// status; arguments parse refuses never reach run.
func TestMainArgs(t *testing.T) {
	parse := func(args []string) (string, error) {
		if len(args) != 1 {
			return "", errors.New("want one name")
		}
		return args[0], nil
	}
	for _, tc := range []struct {
		name   string
		args   []string
		runErr error
		ran    string
		exit   int
	}{
		{name: "Done", args: []string{"x"}, ran: "x", exit: 0},
		{name: "Refused", args: []string{"x"}, runErr: ExitCode(1), ran: "x", exit: 1},
		{name: "BadArgument", args: nil, exit: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ran string
			exit := MainArgs("orderpipe cmd", "usage: cmd NAME\n", tc.args, parse, &strings.Builder{}, &strings.Builder{},
				func(a string) error { ran = a; return tc.runErr })
			if ran != tc.ran || exit != tc.exit {
				t.Errorf("ran with %q, exit %d; want %q, %d", ran, exit, tc.ran, tc.exit)
			}
		})
	}
}

// TestCouldNotRun: the reason is written with the registered secret it
// quotes masked, and the exit status is 2.
func TestCouldNotRun(t *testing.T) {
	secret.Register("hunter2-of-cmd")
	var errOut strings.Builder
	err := CouldNotRun(&errOut, "orderpipe cmd", errors.New("dial postgres://app:hunter2-of-cmd@db:5432/x: refused"))
	if want := "orderpipe cmd: could not run: dial postgres://app:" + secret.Mask + "@db:5432/x: refused\n"; Exit(err) != 2 || errOut.String() != want {
		t.Errorf("exit %d, stderr %q", Exit(err), errOut.String())
	}
}

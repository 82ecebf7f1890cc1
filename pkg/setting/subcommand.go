package setting

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Subcommand reads the first argument of `orderpipe <command> <sub> ...` as
// one of subs: flag.ErrHelp for -h/--help, else a clear error naming the
// choices. fs is a flag set for the subcommand's flags (its own output
// discarded: the caller prints the usage), with --json already defined
// into json.
func Subcommand(command string, args []string, json *bool, subs ...string) (sub string, fs *flag.FlagSet, err error) {
	want := strings.Join(subs[:len(subs)-1], ", ") + " or " + subs[len(subs)-1]
	if len(subs) == 1 {
		want = subs[0]
	}
	if len(args) == 0 {
		return "", nil, errors.New("want a subcommand: " + want)
	}
	switch a := args[0]; {
	case a == "-h" || a == "-help" || a == "--help":
		return "", nil, flag.ErrHelp
	case strings.HasPrefix(a, "-"):
		// A flag before the subcommand: name it as the flag package would.
		return "", nil, fmt.Errorf("flag provided but not defined: %s", a)
	}
	for _, s := range subs {
		if args[0] == s {
			fs = flag.NewFlagSet(command+" "+s, flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			fs.BoolVar(json, "json", false, "JSON output")
			return s, fs, nil
		}
	}
	return "", nil, fmt.Errorf("unknown subcommand %q: want %s", args[0], want)
}

// ParseInterleaved parses args with fs, operands allowed before, between
// and after the flags, and returns the operands in order.
func ParseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return operands, nil
		}
		operands, args = append(operands, fs.Arg(0)), fs.Args()[1:]
	}
}

// ParseArgs parses a command's arguments with parse. -h or --help prints
// usage to stdout and asks for exit 0; a bad argument prints the error and
// usage to stderr and asks for exit 2. Either way the error is an ExitCode
// the command's run returns as it is.
func ParseArgs[A any](command, usage string, args []string, parse func([]string) (A, error), stdout, stderr io.Writer) (A, error) {
	a, err := parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return a, ExitCode(0)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n%s", command, err, usage)
		return a, ExitCode(2)
	}
	return a, nil
}

// ParseFlags parses args with fs for a command whose usage writes itself,
// as ParseArgs does: -h or --help writes the usage to stdout and asks for
// exit 0; a bad flag prints the error and the usage to stderr and asks for
// exit 2. Either way the error is an ExitCode.
func ParseFlags(command string, fs *flag.FlagSet, args []string, usage func(io.Writer), stdout, stderr io.Writer) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout)
		return ExitCode(0)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", command, err)
		usage(stderr)
		return ExitCode(2)
	}
	return nil
}

// ParseFlagsOnly parses args with fs for a command that takes flags and no
// operands: an operand is an error naming it.
func ParseFlagsOnly(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// WriteUsage writes a command's usage text to w, then every flag of fs
// with its default.
func WriteUsage(w io.Writer, usage string, fs *flag.FlagSet) {
	fs.SetOutput(w)
	fmt.Fprint(w, usage)
	fs.PrintDefaults()
}

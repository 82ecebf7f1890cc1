package setting

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
)

// TestSubcommand: the subcommand is one of the choices, help is
// flag.ErrHelp, a flag first or an unknown word is an error naming the
// choices; operands may stand before, between and after the flags.
func TestSubcommand(t *testing.T) {
	var json bool
	for _, c := range []struct {
		args []string
		sub  string
		err  string
	}{
		{nil, "", "want a subcommand: list, show or replay"},
		{[]string{"--help"}, "", flag.ErrHelp.Error()},
		{[]string{"--json", "list"}, "", "flag provided but not defined: --json"},
		{[]string{"drop"}, "", `unknown subcommand "drop": want list, show or replay`},
		{[]string{"show", "x"}, "show", ""},
	} {
		sub, fs, err := Subcommand("dlq", c.args, &json, "list", "show", "replay")
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%q: error %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || sub != c.sub || fs == nil {
			t.Errorf("%q: %q %v, want %q", c.args, sub, err, c.sub)
		}
	}
	_, fs, err := Subcommand("webhooks", []string{"replay"}, &json, "list", "replay")
	if err != nil {
		t.Fatal(err)
	}
	all := fs.Bool("all", false, "")
	ops, err := ParseInterleaved(fs, []string{"a", "--json", "b", "--all", "c"})
	if err != nil || !slices.Equal(ops, []string{"a", "b", "c"}) || !json || !*all {
		t.Errorf("interleaved: %q %v (json %v, all %v), want [a b c], both flags set", ops, err, json, *all)
	}
	if _, err := ParseInterleaved(fs, []string{"a", "--nope"}); err == nil {
		t.Errorf("an undefined flag: %v, want an error", err)
	}
}

// TestParseArgs: help goes to stdout and exits 0, a bad argument goes to
// stderr with the usage and exits 2, and nothing is printed otherwise.
func TestParseArgs(t *testing.T) {
	parse := func(args []string) (string, error) {
		switch {
		case len(args) == 1 && args[0] == "--help":
			return "", flag.ErrHelp
		case len(args) != 1:
			return "", errors.New("want one name")
		}
		return args[0], nil
	}
	for _, tc := range []struct {
		args           []string
		want           string
		exit           int
		stdout, stderr string
	}{
		{args: []string{"x"}, want: "x"},
		{args: []string{"--help"}, exit: 0, stdout: "usage: cmd NAME\n"},
		{args: nil, exit: 2, stderr: "orderpipe cmd: want one name\nusage: cmd NAME\n"},
	} {
		var out, errOut strings.Builder
		got, err := ParseArgs("orderpipe cmd", "usage: cmd NAME\n", tc.args, parse, &out, &errOut)
		if got != tc.want || Exit(err) != tc.exit || (tc.want == "") == (err == nil) || out.String() != tc.stdout || errOut.String() != tc.stderr {
			t.Errorf("%q: %q, exit %d (%v), stdout %q, stderr %q", tc.args, got, Exit(err), err, out.String(), errOut.String())
		}
	}
}

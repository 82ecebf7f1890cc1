package setting

import (
	"flag"
	"slices"
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

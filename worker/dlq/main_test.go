package dlq

import (
	"strings"
	"testing"
)

// TestDLQArgs: the command line is checked before anything is touched.
func TestDLQArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		ok   bool
		want string
	}{
		{[]string{"list"}, true, ""},
		{[]string{"list", "--json", "--limit", "0"}, true, ""},
		{[]string{"show", "2:17"}, true, ""},
		{[]string{"show", "--json", "2:17"}, true, ""},
		{[]string{"replay", "0:1", "3:4", "--json"}, true, ""},
		{[]string{"replay", "--all"}, true, ""},
		{[]string{}, false, "want a subcommand"},
		{[]string{"purge"}, false, `unknown subcommand "purge"`},
		{[]string{"--no-such-flag"}, false, "-no-such-flag"},
		{[]string{"list", "extra"}, false, `unexpected argument "extra"`},
		{[]string{"list", "--limit", "-1"}, false, "--limit"},
		{[]string{"show"}, false, "exactly one"},
		{[]string{"show", "1:2", "3:4"}, false, "exactly one"},
		{[]string{"show", "12"}, false, "<partition>:<offset>"},
		{[]string{"show", "a:b"}, false, "<partition>:<offset>"},
		{[]string{"show", "-1:2"}, false, ""},
		{[]string{"replay"}, false, "--all"},
		{[]string{"replay", "--all", "0:1"}, false, "--all"},
		{[]string{"replay", "--limit", "3"}, false, "-limit"},
	} {
		_, err := parseArgs(tc.args)
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("dlq %v: %v, want ok=%v mentioning %q", tc.args, err, tc.ok, tc.want)
		}
	}
}

package stock

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestScriptsTakeEveryKeyFromKEYS: Redis Cluster routes a script by the keys
// it is given, and a script may only touch those (a key it builds itself
// works on one node and breaks on a cluster the day it hashes elsewhere).
// Every key a script names is KEYS[...] or a local assigned only from KEYS.
func TestScriptsTakeEveryKeyFromKEYS(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	call := regexp.MustCompile(`redis\.call\('([A-Z]+)'(?:,\s*([^,)]+))?`)
	local := regexp.MustCompile(`local\s+([\w\s,]+?)\s*=\s*(KEYS\[[^\n]*)`)
	keyless := map[string]bool{"TIME": true}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fromKeys := map[string]bool{}
		for _, m := range local.FindAllStringSubmatch(string(src), -1) {
			for _, name := range regexp.MustCompile(`\w+`).FindAllString(m[1], -1) {
				fromKeys[name] = true
			}
		}
		calls := call.FindAllStringSubmatch(string(src), -1)
		for _, m := range calls {
			cmd, key := m[1], m[2]
			switch {
			case keyless[cmd]:
			case regexp.MustCompile(`^KEYS\[[^\]]+\]$`).MatchString(key), fromKeys[key]:
			default:
				t.Errorf("%s: redis.call('%s', %s): the key does not come from KEYS", f, cmd, key)
			}
		}
		if len(calls) == 0 && f != "claim.lua" {
			t.Logf("%s calls nothing", f)
		}
	}
}

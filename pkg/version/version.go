// Package version says which build of orderpipe is running: the version the
// build stamped (`-ldflags -X`), the commit and whether the tree was modified
// (from the Go toolchain's VCS stamping, or stamped too where the build has
// no .git, as in the Docker build), and the Go version. It never reads the
// environment and never changes at run time.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Stamped by the build, e.g.
//
//	go build -ldflags "-X orderpipe/pkg/version.version=v1.2.3 -X orderpipe/pkg/version.commit=$(git rev-parse HEAD)"
//
// (the Makefile's build does). Unstamped, the version is the module
// version the Go toolchain derived from VCS tags, else "dev", and the commit
// is the toolchain's vcs.revision.
var (
	version  string
	commit   string
	modified string // "true" or "false"; stamped with commit where there is no .git
)

// Info is one build's identity.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`   // "unknown" when neither stamped nor recorded
	Modified  bool   `json:"modified"` // the working tree had uncommitted changes
	GoVersion string `json:"goVersion"`
}

// Get reads the build's identity.
func Get() Info {
	in := Info{Version: version, Commit: commit, Modified: modified == "true", GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.modified":
				if modified == "" {
					in.Modified = s.Value == "true"
				}
			}
		}
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
	}
	if in.Version == "" {
		in.Version = "dev"
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	return in
}

// String is the one-line form: "orderpipe v1.2.3 (commit abc123, modified, go1.26.8)".
func (i Info) String() string {
	mod := ""
	if i.Modified {
		mod = ", modified"
	}
	return fmt.Sprintf("orderpipe %s (commit %s%s, %s)", i.Version, i.Commit, mod, i.GoVersion)
}

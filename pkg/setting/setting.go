// Package setting is how orderpipe is configured: environment variables, each
// declared once (name, default, help) beside the Config of the package that
// reads it. The binary lists the declarations of what it links (`orderpipe
// env`), reads them through Lookup and Reader, and its tests hold the README
// to them. A package never reads a variable it has not declared, and never
// gives a declared variable a second default.
package setting

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Var is one environment variable: its name, its default as written in the
// environment, and what it means.
type Var struct {
	Name, Default, Help string
}

// Duration is the default as a duration; a declaration whose default does not
// parse is a programming error (a test reads every default).
func (v Var) Duration() time.Duration {
	d, err := time.ParseDuration(v.Default)
	if err != nil {
		panic(fmt.Sprintf("setting %s: default %q: %v", v.Name, v.Default, err))
	}
	return d
}

// Int is the default as an integer (see Duration).
func (v Var) Int() int {
	n, err := strconv.Atoi(v.Default)
	if err != nil {
		panic(fmt.Sprintf("setting %s: default %q: %v", v.Name, v.Default, err))
	}
	return n
}

// Env is the value of a declared variable: what the environment gives, else
// its default.
type Env func(name string) string

// Lookup is the Env of vars in this process's environment: NAME, else the
// content of the file NAME_FILE names (how Docker and Kubernetes secrets
// arrive, so a secret is never in the environment or an image), else the
// default. Reading an undeclared name panics: every variable is declared.
// Check reports a NAME_FILE that cannot be read.
func Lookup(vars []Var) Env {
	return func(name string) string {
		if v, ok := os.LookupEnv(name); ok {
			return v
		}
		if v, ok, _ := fromFile(name); ok {
			return v
		}
		for _, v := range vars {
			if v.Name == name {
				return v.Default
			}
		}
		panic("undeclared environment variable " + name)
	}
}

// Check reports, for each of vars, NAME and NAME_FILE both set, or a NAME_FILE
// that cannot be read.
func Check(vars []Var) []string {
	var errs []string
	for _, v := range vars {
		if _, _, err := fromFile(v.Name); err != nil {
			errs = append(errs, err.Error())
		}
	}
	return errs
}

// Set reports whether name is given, directly or as NAME_FILE.
func Set(name string) bool {
	_, ok := os.LookupEnv(name)
	return ok || os.Getenv(name+"_FILE") != ""
}

// fromFile reads the file NAME_FILE names, without the trailing newline
// secret files usually end with. Setting both NAME and NAME_FILE is an error.
func fromFile(name string) (string, bool, error) {
	path, ok := os.LookupEnv(name + "_FILE")
	if !ok || path == "" {
		return "", false, nil
	}
	if _, both := os.LookupEnv(name); both {
		return "", false, fmt.Errorf("%s and %s_FILE are both set: set one", name, name)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false, fmt.Errorf("%s_FILE: %w", name, err)
	}
	return strings.TrimRight(string(b), "\r\n"), true, nil
}

// Write prints vars as `orderpipe env` does: name, quoted default, meaning.
func Write(w io.Writer, vars []Var) {
	name, def := 0, 0
	for _, v := range vars {
		name, def = max(name, len(v.Name)), max(def, len(strconv.Quote(v.Default)))
	}
	for _, v := range vars {
		fmt.Fprintf(w, "%-*s %-*q %s\n", name, v.Name, def, v.Default, v.Help)
	}
}

// Reader reads typed values from an Env and collects what is wrong, so one
// start reports every bad setting at once.
type Reader struct {
	Env  Env
	errs []string
}

// String is the variable's value.
func (r *Reader) String(name string) string { return r.Env(name) }

// List is a comma-separated value, blanks dropped.
func (r *Reader) List(name string) []string {
	var out []string
	for _, s := range strings.Split(r.Env(name), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Int is a non-negative integer.
func (r *Reader) Int(name string) int {
	n, err := strconv.Atoi(r.Env(name))
	if err != nil || n < 0 {
		r.Fail("%s: want a non-negative integer, got %q", name, r.Env(name))
	}
	return n
}

// Float is a non-negative number.
func (r *Reader) Float(name string) float64 {
	f, err := strconv.ParseFloat(r.Env(name), 64)
	if err != nil || f < 0 {
		r.Fail("%s: want a non-negative number, got %q", name, r.Env(name))
	}
	return f
}

// Duration is a positive Go duration.
func (r *Reader) Duration(name string) time.Duration {
	d, err := time.ParseDuration(r.Env(name))
	if err != nil || d <= 0 {
		r.Fail("%s: want a positive Go duration such as 30s, got %q", name, r.Env(name))
	}
	return d
}

// Bool is true or false (as strconv.ParseBool reads them).
func (r *Reader) Bool(name string) bool {
	b, err := strconv.ParseBool(r.Env(name))
	if err != nil {
		r.Fail("%s: want true or false, got %q", name, r.Env(name))
	}
	return b
}

// Addr is a listen address, host:port with a port number (0 picks a free
// one) or a service name; empty only where off is allowed, which the caller
// decides. What does not parse fails here, before anything has started, not
// when the listener opens after the process has migrated and connected.
func (r *Reader) Addr(name string, emptyOK bool) string {
	v := r.Env(name)
	if v == "" && emptyOK {
		return v
	}
	_, port, err := net.SplitHostPort(v)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil || port == "" {
		r.Fail("%s: want a listen address host:port such as 127.0.0.1:8080 or :8080, got %q", name, v)
	}
	return v
}

// Fail records what is wrong with a setting.
func (r *Reader) Fail(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// Err is every failure recorded, as one error; nil when there was none.
func (r *Reader) Err() error {
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("bad configuration:\n  %s", strings.Join(r.errs, "\n  "))
}

// ExitCode is an error that asks a command's Main for a specific exit status.
type ExitCode int

func (c ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// Exit is the exit status of a command's run: 0 for nil, an ExitCode's own,
// else 1 with the error logged.
func Exit(err error) int {
	var code ExitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	}
	slog.Error("orderpipe failed", "err", err)
	return 1
}

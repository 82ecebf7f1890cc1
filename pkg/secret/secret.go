// Package secret keeps secret values out of what a process writes: the
// configuration registers every secret it reads (passwords, tokens), and the
// log handler and the writers of this package replace any of them that
// reaches a log line, an error message or a report with "[REDACTED]". It is
// the safety net under the rule that code never formats a secret: it does not
// decide what is secret (config does) and never stores one anywhere else.
package secret

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Mask is what a secret is replaced with.
const Mask = "[REDACTED]"

// minLen is the shortest value registered: masking a two-letter string in
// every line would garble the logs more than it protects (no real password
// or token is that short; config refuses none, it just is not masked).
const minLen = 4

var (
	mu       sync.RWMutex
	values   []string
	replacer *strings.Replacer
)

// Register adds values to the set every Scrub masks. Empty and very short
// values are ignored. Safe for concurrent use.
func Register(vs ...string) {
	mu.Lock()
	defer mu.Unlock()
	for _, v := range vs {
		if len(v) < minLen {
			continue
		}
		dup := false
		for _, have := range values {
			if have == v {
				dup = true
				break
			}
		}
		if !dup {
			values = append(values, v)
		}
		// The forms a value takes inside a URL or a quoted string, too.
		for _, enc := range []string{url.QueryEscape(v), url.PathEscape(v), strings.Trim(fmt.Sprintf("%q", v), `"`)} {
			if enc != v && len(enc) >= minLen {
				values = append(values, enc)
			}
		}
	}
	// Longest first, so a secret containing another is masked whole.
	sorted := append([]string(nil), values...)
	for i := 1; i < len(sorted); i++ {
		for j := i; j > 0 && len(sorted[j]) > len(sorted[j-1]); j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	pairs := make([]string, 0, 2*len(sorted))
	for _, v := range sorted {
		pairs = append(pairs, v, Mask)
	}
	replacer = strings.NewReplacer(pairs...)
}

func active() bool {
	mu.RLock()
	defer mu.RUnlock()
	return replacer != nil
}

// Scrub returns s with every registered secret masked.
func Scrub(s string) string {
	mu.RLock()
	r := replacer
	mu.RUnlock()
	if r == nil {
		return s
	}
	return r.Replace(s)
}

// URLPassword is the password of a URL-form connection string (the
// userinfo password and any password=/sslpassword= query value), or of a
// keyword/value one (password=...), for Register. It never fails: what does
// not parse yields what the patterns find.
func URLPassword(dsn string) []string {
	var out []string
	if u, err := url.Parse(dsn); err == nil {
		if p, ok := u.User.Password(); ok {
			out = append(out, p)
		}
		for k, vs := range u.Query() {
			if strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword") {
				out = append(out, vs...)
			}
		}
	} else if m := rawUserinfo.FindStringSubmatch(dsn); m != nil {
		out = append(out, m[1])
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		if v := strings.Trim(m[2], "'"); !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

var (
	// scheme://user:PASSWORD@ in a URL that did not parse (a bad port, say).
	rawUserinfo = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@]*:([^@]+)@`)
	// password=... and sslpassword=..., quoted or not, in keyword/value form.
	kvPassword = regexp.MustCompile(`(?i)(^|[\s&?])(?:ssl)?password=('[^']*'|[^\s&]*)`)
)

// Handler wraps a slog.Handler so that no registered secret reaches it: the
// message and every attribute value, including errors and groups, are
// scrubbed.
func Handler(h slog.Handler) slog.Handler { return handler{h} }

type handler struct{ next slog.Handler }

func (h handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	if !active() {
		return h.next.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, Scrub(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(scrubAttr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = scrubAttr(a)
	}
	return handler{h.next.WithAttrs(clean)}
}

func (h handler) WithGroup(name string) slog.Handler { return handler{h.next.WithGroup(name)} }

func scrubAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Scrub(v.String()))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]any, len(g))
		for i, ga := range g {
			clean[i] = scrubAttr(ga)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		// Errors, slices, structs: rendered as the JSON handler would
		// show their text, and replaced by the scrubbed text only when a
		// secret was in it (otherwise the value keeps its JSON shape).
		var text string
		switch x := v.Any().(type) {
		case error:
			text = x.Error()
		case fmt.Stringer:
			text = x.String()
		default:
			text = fmt.Sprintf("%+v", x)
		}
		if clean := Scrub(text); clean != text {
			return slog.String(a.Key, clean)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// Writer wraps w so that every write is scrubbed (for reports and messages
// written to stdout/stderr without the logger). A secret split across two
// writes is not seen: callers write whole lines.
func Writer(w io.Writer) io.Writer { return writer{w} }

type writer struct{ w io.Writer }

func (w writer) Write(p []byte) (int, error) {
	clean := Scrub(string(p))
	if _, err := io.WriteString(w.w, clean); err != nil {
		return 0, err
	}
	return len(p), nil
}

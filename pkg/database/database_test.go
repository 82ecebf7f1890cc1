package database

import (
	"context"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://app:s3cretPw@db:5432/orderpipe?sslmode=verify-full", "postgres://app:xxxxx@db:5432/orderpipe?sslmode=verify-full"},
		{"postgresql://app@db/orderpipe", "postgresql://app@db/orderpipe"},
		{"postgres://app@db/orderpipe?password=s3cretPw", "postgres://app@db/orderpipe?password=xxxxx"},
		{"postgres://app@db/orderpipe?sslpassword=s3cretPw&sslmode=verify-full", "postgres://app@db/orderpipe?sslmode=verify-full&sslpassword=xxxxx"},
		{"host=db user=app password=s3cretPw dbname=orderpipe", "host=db user=app password=xxxxx dbname=orderpipe"},
		{"host=db password='s3cret Pw' dbname=orderpipe", "host=db password=xxxxx dbname=orderpipe"},
		{"postgres://app:s3cretPw@db:port/orderpipe", "(unparsable database url)"},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestParseErrorsHideThePassword: a connection string that does not parse
// is reported without its password (url.Parse's own error quotes it whole).
func TestParseErrorsHideThePassword(t *testing.T) {
	ctx := context.Background()
	for _, dsn := range []string{
		"postgres://app:s3cretPw@127.0.0.1:notaport/orderpipe",
		"postgres://app:s3cretPw@127.0.0.1:5432/orderpipe?sslmode=bogus",
		"host=127.0.0.1 password=s3cretPw port=notaport dbname=orderpipe",
	} {
		_, err := OpenLazy(ctx, dsn, 1)
		if err == nil {
			t.Errorf("OpenLazy(%q): no error", dsn)
		} else if strings.Contains(err.Error(), "s3cretPw") {
			t.Errorf("OpenLazy error shows the password: %v", err)
		}
		for name, f := range map[string]func(context.Context, string) error{"EnsureDatabase": EnsureDatabase, "PingServer": PingServer} {
			err = f(ctx, dsn)
			if err == nil {
				t.Errorf("%s(%q): no error", name, dsn)
			} else if strings.Contains(err.Error(), "s3cretPw") {
				t.Errorf("%s error shows the password: %v", name, err)
			}
		}
	}
}

package target

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"
)

func TestResolve(t *testing.T) {
	table := Table{"all": {Deps: []string{"local", "a", "b"}}, "local": {}, "a": {}, "b": {Deps: []string{"a"}}}
	if got := table.Resolve([]string{"all", "b"}); !slices.Equal(got, []string{"local", "a", "b", "all"}) {
		t.Errorf("Resolve: %v", got)
	}
}

func TestRunRefusesAnUnknownTarget(t *testing.T) {
	err := Run(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), Table{}, []string{"nope"}, &Shared{}, nil)
	if err == nil || err.Error() != `unknown target "nope"` {
		t.Errorf("err %v", err)
	}
}

// TestWaitReachable: a refused connection is waited out, a certificate
// error ends the wait at once.
func TestWaitReachable(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	refused := func(ctx context.Context) error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := refused(context.Background()); !transient(err) {
		t.Fatalf("a refused connection is not transient: %v", err)
	}
	calls := 0
	err = WaitReachable(context.Background(), log, "x", func(ctx context.Context) error {
		if calls++; calls < 3 {
			return refused(ctx)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("refused twice, then up: err %v after %d pings", err, calls)
	}
	bad := x509.UnknownAuthorityError{}
	start, calls := time.Now(), 0
	err = WaitReachable(context.Background(), log, "x", func(context.Context) error { calls++; return bad })
	if !errors.As(err, &x509.UnknownAuthorityError{}) || calls != 1 || time.Since(start) > time.Second {
		t.Errorf("certificate error: err %v after %d pings, %s", err, calls, time.Since(start))
	}
}

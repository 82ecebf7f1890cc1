//go:build !dev

package main

import "testing"

// withEmbeddedBroker skips: the production build has no embedded broker
// (embedded_dev_test.go has the development build's).
func withEmbeddedBroker(t *testing.T) (mod func(*config), addr string) {
	t.Skip("the embedded broker is in development builds only")
	return nil, ""
}

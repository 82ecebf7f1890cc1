//go:build dev

package main

import (
	"net"
	"strconv"
	"testing"
)

// withEmbeddedBroker configures a pipeline as make run does, without
// KAFKA_BROKERS: `all` embeds the broker, here on addr (127.0.0.1, a free
// port), where another client reaches it over TCP.
func withEmbeddedBroker(t *testing.T) (mod func(*config), addr string) {
	addr = freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	return func(c *config) {
		c.Kafka.Brokers = nil
		c.dev.embedded.Port, _ = strconv.Atoi(port)
	}, addr
}

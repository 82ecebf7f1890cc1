//go:build !dev

package main

import (
	"context"
	"log/slog"
)

// The production build links no test fake: no embedded Kafka broker (kfake),
// no miniredis, no embedded-postgres. `make run` and `make build-dev` build
// with -tags dev, which brings them in (standin.go, cmd_kafka.go).

// startStandins starts nothing: a production process uses the servers it is
// configured with, and says so when they do not answer.
func startStandins(context.Context, *slog.Logger, *config) (stop func(), err error) {
	return func() {}, nil
}

func startBroker(config) (brokers []string, stop func(), err error) {
	return nil, nil, errNoEmbedded
}

func runKafka(context.Context, *slog.Logger, config) error {
	return errNoEmbedded
}

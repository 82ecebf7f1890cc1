package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// mustWrite writes msgs with w, retrying for up to 30 s while the topic is
// unknown to the broker kafka-go asked: on a real cluster a topic created a
// moment ago (each test has its own) reaches every broker's metadata a
// little later, and kafka-go's Writer fails at once on a topic its metadata
// lacks. Any other error fails the test.
func mustWrite(tb testing.TB, ctx context.Context, w interface {
	WriteMessages(context.Context, ...kafka.Message) error
}, msgs ...kafka.Message) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := w.WriteMessages(ctx, msgs...)
		if err == nil {
			return
		}
		if !unknownTopic(err) || time.Now().After(deadline) {
			tb.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func unknownTopic(err error) bool {
	if errors.Is(err, kafka.UnknownTopicOrPartition) {
		return true
	}
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil && !errors.Is(e, kafka.UnknownTopicOrPartition) {
				return false
			}
		}
		return we.Count() > 0
	}
	return false
}

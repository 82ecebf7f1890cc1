package standin

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"orderpipe/pkg/testenv"
)

// TestKafkaAdvertisesProxy: with AdvertisedPort the broker names the proxy
// in front of it to clients, so a client bootstrapped through the proxy
// stays on it: with the proxy down nothing gets through, although the
// broker itself still listens.
func TestKafkaAdvertisesProxy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	proxy := testenv.MustProxy(t, "127.0.0.1:"+strconv.Itoa(port))
	_, advPort, _ := net.SplitHostPort(proxy.Addr)
	adv, _ := strconv.Atoi(advPort)
	k, err := StartKafka(KafkaOptions{Port: port, Partitions: 1, Topics: []string{"adv"}, AdvertisedPort: adv})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if len(k.Brokers) != 1 || k.Brokers[0] != proxy.Addr {
		t.Fatalf("brokers %v, want the proxy %s", k.Brokers, proxy.Addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	brokers, err := conn.Brokers()
	conn.Close()
	if err != nil || len(brokers) != 1 || net.JoinHostPort(brokers[0].Host, strconv.Itoa(brokers[0].Port)) != proxy.Addr {
		t.Fatalf("metadata names %+v (%v), want the proxy %s", brokers, err, proxy.Addr)
	}
	w := &kafka.Writer{Addr: kafka.TCP(proxy.Addr), Topic: "adv", RequiredAcks: kafka.RequireAll}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("through the proxy")}); err != nil {
		t.Fatalf("producing through the proxy: %v", err)
	}

	proxy.Down()
	dctx, dcancel := context.WithTimeout(ctx, 3*time.Second)
	defer dcancel()
	w2 := &kafka.Writer{Addr: kafka.TCP(proxy.Addr), Topic: "adv", RequiredAcks: kafka.RequireAll}
	defer w2.Close()
	if err := w2.WriteMessages(dctx, kafka.Message{Value: []byte("around the proxy")}); err == nil {
		t.Error("produced with the proxy down: the client went around it")
	}
	direct, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		t.Fatalf("the broker itself stopped listening on %d: %v", port, err)
	}
	direct.Close()
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
)

// testAllReachesItsEmbeddedBrokerThroughMemory: `orderpipe all` without
// KAFKA_BROKERS (make run) embeds the broker, and its gateway, worker and
// relay reach it through memory: an order is accepted, made and its
// orders.status event published while no TCP connection to the broker's
// port exists; then another client (this test) reads the topics over TCP
// and every invariant holds.
func testAllReachesItsEmbeddedBrokerThroughMemory(t *testing.T, e engine) {
	t.Parallel()
	embed, addr := withEmbeddedBroker(t)
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	p := mustPipeline(t, e, components{"all"}, embed)
	it := stock.Item{ActivityID: 41, ItemID: 410}
	p.mustSale(t, 41, 1, map[int64]int64{410: 5})
	r := p.order(t, orderBody{RequestID: "mem-1", UserID: 1, ActivityID: 41, ItemID: 410, Quantity: 1})
	if r.Status != 202 {
		t.Fatalf("order: %d %v", r.Status, r.Body)
	}
	no := r.Str("orderNo")
	p.waitStatus(t, no, "UNPAID")
	testenv.WaitFor(t, 30*time.Second, no+"'s status event published", func() bool {
		evs, err := p.Orders.EventsOf(context.Background(), no)
		return err == nil && len(evs) == 1 && evs[0].PublishedAt != nil
	})
	if n := tcpConnsTo(t, port); n != 0 {
		t.Errorf("%d TCP connections to the embedded broker's port %d, want none: all's own clients go through memory", n, port)
	}

	// Another process's view: the topics over TCP.
	p.Cfg.Kafka.Brokers = []string{addr}
	p.waitDrained(t, it)
	p.assertInvariants(t, it) // I7 reads orders.status over TCP
}

// tcpConnsTo counts the established TCP connections whose local port is port
// (the accepted side of connections to a listener there), from the kernel's
// table of this network namespace.
func tcpConnsTo(t *testing.T, port int) int {
	t.Helper()
	n := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st ...; addresses are HEXIP:HEXPORT.
			if len(fields) < 4 || fields[3] != "01" { // 01: ESTABLISHED
				continue
			}
			if strings.HasSuffix(fields[1], fmt.Sprintf(":%04X", port)) {
				n++
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

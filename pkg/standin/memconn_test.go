package standin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"golang.org/x/net/nettest"

	"orderpipe/pkg/event"
)

// TestMemConnIsAConn runs x/net's conformance suite for net.Conn (basic and
// racy I/O, past, present and future deadlines, close while blocked,
// concurrent methods) on both ends of an in-memory connection.
func TestMemConnIsAConn(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b := memPair(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2})
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

func TestMemConnAsTCP(t *testing.T) {
	t.Run("WritesPastTheBufferWaitForTheReader", func(t *testing.T) {
		a, b := memPair(nil, nil)
		defer a.Close()
		defer b.Close()
		big := bytes.Repeat([]byte("0123456789abcdef"), pipeMax/16)
		if _, err := a.Write(big); err != nil {
			t.Fatal(err)
		}
		// The buffer is full: the next write waits until its deadline.
		a.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := a.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("write to a full pipe: %v, want a deadline error", err)
		}
		var ne net.Error
		a.SetWriteDeadline(time.Time{})
		done := make(chan error, 1)
		go func() {
			_, err := a.Write([]byte("tail"))
			done <- err
		}()
		got := make([]byte, len(big)+4)
		if _, err := io.ReadFull(b, got); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:len(big)], big) || string(got[len(big):]) != "tail" {
			t.Fatal("bytes arrived altered or out of order")
		}
		b.SetReadDeadline(time.Now().Add(-time.Second))
		if _, err := b.Read(got); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read past the deadline: %v, want a net.Error that is a timeout", err)
		}
	})
	t.Run("ClosedPeerDrainsThenEOF", func(t *testing.T) {
		a, b := memPair(nil, nil)
		defer b.Close()
		a.Write([]byte("last words"))
		a.Close()
		got, err := io.ReadAll(b)
		if err != nil || string(got) != "last words" {
			t.Fatalf("read after the peer closed: %q, %v; want its last bytes, then EOF", got, err)
		}
		if _, err := b.Write([]byte("anyone?")); err == nil {
			t.Fatal("a write to a closed peer succeeded")
		}
		if _, err := a.Read(got); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed end: %v, want net.ErrClosed", err)
		}
	})
}

// TestEmbeddedBrokerThroughMemory: a client of the process that runs the
// broker reaches it through memory, another one over TCP on the same
// listener, and both see the same topic; once the broker stops, a dial
// through memory is refused.
func TestEmbeddedBrokerThroughMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k, err := StartKafka(KafkaOptions{Partitions: 1, Topics: []string{"mem"}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			k.Close()
		}
	}()

	c, err := k.Dial(ctx, "tcp", k.Brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*memConn); !ok {
		t.Fatalf("the broker's own address dialled %T, want the in-memory connection", c)
	}
	c.Close()

	inProcess := event.Security{Dial: k.Dial}
	w := event.NewWriter(event.WriterConfig{Brokers: k.Brokers, Topic: "mem", Security: inProcess})
	for _, v := range []string{"one", "two"} {
		if err := w.WriteMessages(ctx, kafka.Message{Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	for name, sec := range map[string]event.Security{"memory": inProcess, "tcp": {}} {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Brokers, Topic: "mem", Partition: 0, Dialer: sec.Dialer(5 * time.Second)})
		var got []string
		for len(got) < 2 {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got = append(got, string(m.Value))
		}
		r.Close()
		if got[0] != "one" || got[1] != "two" {
			t.Errorf("%s read %v, want [one two]", name, got)
		}
	}

	k.Close()
	stopped = true
	if c, err := k.Dial(ctx, "tcp", k.Brokers[0]); !errors.Is(err, errBrokerClosed) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial after the broker stopped: %v, want %v", err, errBrokerClosed)
	}
}

package standin

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestStaleMemberIsRemoved: a member whose JoinGroup its client gave up on
// while the group waited for the others (the connection closed before the
// answer) may stay in a kfake group with no session timer and be handed a
// partition nobody consumes — when kfake's reply to the closed connection
// happens to be queued rather than dropped (a random choice, about one
// time in two). The embedded broker removes such a member as Kafka's
// session timeout would, and the live member then consumes every
// partition. The scenario is repeated until the reaper has removed a
// stale member; each stale member must be gone within twice its session timeout.
func TestStaleMemberIsRemoved(t *testing.T) {
	t.Parallel()
	const topic, group = "stale", "stale-group"
	reaped := make(chan []string, 16)
	k, err := StartKafka(KafkaOptions{Partitions: 2, Topics: []string{topic},
		StaleFunc: func(members []string, err error) {
			if err != nil {
				t.Logf("reaper: %v", err)
			}
			if len(members) > 0 {
				reaped <- members
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The live member, configured as the worker's reader but with a slow
	// heartbeat so the stale member's join is sure to be pending when it closes.
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Brokers, Topic: topic, GroupID: group,
		SessionTimeout: 6 * time.Second, HeartbeatInterval: 3 * time.Second, RebalanceTimeout: 6 * time.Second,
		MaxWait: 100 * time.Millisecond})
	defer r.Close()
	if _, err := k.Cluster.WaitGroupStable(ctx, group, 1); err != nil {
		t.Fatalf("the live member did not join: %v", err)
	}

	const attempts = 8
	var staleIDs []string
	for i := 0; i < attempts && len(staleIDs) == 0; i++ {
		staleID := joinAndVanish(ctx, t, k, group, topic)
		if _, err := k.Cluster.WaitGroupInfo(ctx, group, func(gi *kfake.GroupInfo) bool {
			return gi != nil && gi.State == "Stable" && len(gi.Members) == 2 && gi.NumAssigned() == 2
		}); err != nil {
			t.Fatalf("attempt %d: the vanished member was not given a partition: %v", i+1, err)
		}
		// Session timeout 6 s: Kafka would have removed it after that;
		// the reaper does within twice that plus a pass.
		gone, cancelGone := context.WithTimeout(ctx, 2*6*time.Second+5*time.Second)
		gi, err := k.Cluster.WaitGroupInfo(gone, group, func(gi *kfake.GroupInfo) bool {
			return gi != nil && gi.State == "Stable" && len(gi.Members) == 1
		})
		cancelGone()
		if err != nil {
			t.Fatalf("attempt %d: member %s still in the group after twice its session timeout: %+v", i+1, staleID, k.Cluster.GroupInfo(group).Members)
		}
		if gi.Members[0].MemberID == staleID {
			t.Fatalf("attempt %d: the live member was removed, the silent one %s kept", i+1, staleID)
		}
		select {
		case staleIDs = <-reaped:
		default: // kfake expired it itself: its reply reached the connection's queue
		}
	}
	if len(staleIDs) == 0 {
		t.Fatalf("no stale member in %d attempts: the scenario no longer produces one", attempts)
	}
	t.Logf("reaped %v", staleIDs)

	for p := range 2 {
		conn, err := kafka.DialLeader(ctx, "tcp", k.Brokers[0], topic, p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.WriteMessages(kafka.Message{Value: []byte{byte(p)}})
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	got := map[int]bool{}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	for len(got) < 2 {
		m, err := r.ReadMessage(rctx)
		if err != nil {
			t.Fatalf("read %v of both partitions: %v", got, err)
		}
		got[m.Partition] = true
	}
}

// joinAndVanish joins group as a second member and closes the connection
// while the join waits for the live member to rejoin (a client whose
// JoinGroup timed out), and returns its member ID.
func joinAndVanish(ctx context.Context, t *testing.T, k *Kafka, group, topic string) (member string) {
	t.Helper()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", k.own)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{topic}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version = 5
	join.Group = group
	join.SessionTimeoutMillis = 6000
	join.RebalanceTimeoutMillis = 6000
	join.ProtocolType = "consumer"
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name = "range"
	proto.Metadata = meta.AppendTo(nil)
	join.Protocols = append(join.Protocols, proto)

	resp, err := roundTrip(conn, join)
	if err != nil {
		t.Fatal(err)
	}
	jr := resp.(*kmsg.JoinGroupResponse)
	if !errors.Is(kerr.ErrorForCode(jr.ErrorCode), kerr.MemberIDRequired) {
		t.Fatalf("first join: %v, want MEMBER_ID_REQUIRED", kerr.ErrorForCode(jr.ErrorCode))
	}
	join.MemberID = jr.MemberID
	if err := writeRequest(conn, join, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Cluster.WaitGroupInfo(ctx, group, func(gi *kfake.GroupInfo) bool {
		return gi != nil && gi.State == "PreparingRebalance" && len(gi.Members) == 2
	}); err != nil {
		t.Fatalf("the second join did not start a rebalance: %v", err)
	}
	conn.Close()
	return join.MemberID
}

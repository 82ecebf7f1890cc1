package standin

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"orderpipe/pkg/tick"
)

// Stale members.
//
// kfake starts a classic group member's session timer only when a reply to
// that member reaches it. A member whose JoinGroup the client gave up on
// (its connection timed out while the group waited for the others to
// rejoin, e.g. a SIGSTOPped worker or a slow link) is still in the group;
// when the rebalance completes, its JoinGroup reply goes to a dead
// connection, so it never gets a session timer, and once the leader's
// SyncGroup hands it partitions the group is Stable with a member nobody
// heartbeats for. Apache Kafka expires such a member after its session
// timeout; kfake keeps it for ever, and the partitions assigned to it are
// never consumed (orders stay PENDING until the next rebalance, which may
// never come).
//
// The embedded broker therefore watches the members itself: it notes every
// JoinGroup, SyncGroup, Heartbeat and OffsetCommit a member sends, and a
// member of a Stable group that has sent none of them for twice its session
// timeout (at least StaleMinSilence) is removed with a LeaveGroup on its
// behalf — what Kafka's session timeout would have done. A live kafka-go
// member of a Stable group heartbeats every HeartbeatInterval, so it is
// never touched; one that was only paused comes back, is told
// UNKNOWN_MEMBER_ID and joins again, as on Kafka.

// StaleMinSilence is the shortest silence after which a member is reaped,
// whatever its session timeout.
const StaleMinSilence = 10 * time.Second

// staleFallbackSession is the session timeout assumed for a member whose
// JoinGroup was not seen (Kafka's default).
const staleFallbackSession = 45 * time.Second

type memberKey struct{ group, member string }

type memberSeen struct {
	at      time.Time
	session time.Duration // from its JoinGroup; 0 if not seen
}

type staleWatch struct {
	mu   sync.Mutex
	seen map[memberKey]memberSeen
	now  func() time.Time
}

func newStaleWatch() *staleWatch {
	return &staleWatch{seen: map[memberKey]memberSeen{}, now: time.Now}
}

func (g *staleWatch) saw(group, member string, session time.Duration) {
	if member == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	k := memberKey{group, member}
	s := g.seen[k]
	s.at = g.now()
	if session > 0 {
		s.session = session
	}
	g.seen[k] = s
}

// watch makes the cluster report every request that shows a member alive;
// the requests are then handled as usual.
func (g *staleWatch) watch(k *Kafka) {
	observe := func(key kmsg.Key, fn func(kmsg.Request)) {
		k.Cluster.ControlKey(int16(key), func(r kmsg.Request) (kmsg.Response, error, bool) {
			fn(r)
			return nil, nil, false
		})
	}
	observe(kmsg.JoinGroup, func(r kmsg.Request) {
		req := r.(*kmsg.JoinGroupRequest)
		g.saw(req.Group, req.MemberID, time.Duration(req.SessionTimeoutMillis)*time.Millisecond)
	})
	observe(kmsg.SyncGroup, func(r kmsg.Request) {
		req := r.(*kmsg.SyncGroupRequest)
		g.saw(req.Group, req.MemberID, 0)
	})
	observe(kmsg.Heartbeat, func(r kmsg.Request) {
		req := r.(*kmsg.HeartbeatRequest)
		g.saw(req.Group, req.MemberID, 0)
	})
	observe(kmsg.OffsetCommit, func(r kmsg.Request) {
		req := r.(*kmsg.OffsetCommitRequest)
		g.saw(req.Group, req.MemberID, 0)
	})
}

// groups returns the groups the broker has seen members of.
func (g *staleWatch) groups() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	set := map[string]bool{}
	for k := range g.seen {
		set[k.group] = true
	}
	out := make([]string, 0, len(set))
	for name := range set {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// silent returns the members of group (its current members, a Stable
// group) that have been silent too long. A member never seen is noted now
// and judged from then on. Entries of members no longer in the group are
// forgotten.
func (g *staleWatch) silent(group string, members []string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	in := make(map[string]bool, len(members))
	var out []string
	for _, m := range members {
		in[m] = true
		k := memberKey{group, m}
		s, ok := g.seen[k]
		if !ok {
			g.seen[k] = memberSeen{at: now}
			continue
		}
		limit := 2 * s.session
		if s.session == 0 {
			limit = 2 * staleFallbackSession
		}
		limit = max(limit, StaleMinSilence)
		if now.Sub(s.at) > limit {
			out = append(out, m)
		}
	}
	for k := range g.seen {
		if k.group == group && !in[k.member] {
			delete(g.seen, k)
		}
	}
	sort.Strings(out)
	return out
}

// ReapStaleMembers removes, from every group the broker has seen members of, the
// members that have been silent too long while their group was Stable (see
// above), and returns them as "group/member".
func (k *Kafka) ReapStaleMembers(ctx context.Context) ([]string, error) {
	var reaped []string
	var errs []error
	for _, group := range k.stale.groups() {
		gi := k.Cluster.GroupInfo(group)
		if gi == nil || gi.State != "Stable" {
			continue
		}
		ids := make([]string, len(gi.Members))
		for i, m := range gi.Members {
			ids[i] = m.MemberID
		}
		silent := k.stale.silent(group, ids)
		if len(silent) == 0 {
			continue
		}
		left, err := k.leave(ctx, group, silent)
		if err != nil {
			errs = append(errs, fmt.Errorf("removing silent members %v of group %s: %w", silent, group, err))
		}
		for _, m := range left {
			reaped = append(reaped, group+"/"+m)
		}
	}
	return reaped, errors.Join(errs...)
}

// leave sends the broker, on its own address (not through an advertised
// proxy), a LeaveGroup for members, and returns those it removed.
func (k *Kafka) leave(ctx context.Context, group string, members []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", k.own)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = 3 // members by ID; the last version without flexible headers
	req.Group = group
	for _, m := range members {
		rm := kmsg.NewLeaveGroupRequestMember()
		rm.MemberID = m
		req.Members = append(req.Members, rm)
	}
	kresp, err := roundTrip(conn, req)
	if err != nil {
		return nil, fmt.Errorf("leave group: %w", err)
	}
	resp := kresp.(*kmsg.LeaveGroupResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	var left []string
	for _, m := range resp.Members {
		if m.ErrorCode == 0 {
			left = append(left, m.MemberID)
		}
	}
	return left, nil
}

// reapStaleMembers runs ReapStaleMembers every interval until ctx ends.
func (k *Kafka) reapStaleMembers(ctx context.Context, every time.Duration, report func([]string, error)) {
	tick.Every(ctx, every, func() {
		reaped, err := k.ReapStaleMembers(ctx)
		if report != nil && (len(reaped) > 0 || err != nil) {
			report(reaped, err)
		}
	})
}

// roundTrip sends req on conn and reads its response.
func roundTrip(conn net.Conn, req kmsg.Request) (kmsg.Response, error) {
	const corr = 1
	if err := writeRequest(conn, req, corr); err != nil {
		return nil, err
	}
	return readResponse(conn, req, corr)
}

// writeRequest writes req, framed as Kafka's protocol wants, on conn.
func writeRequest(conn net.Conn, req kmsg.Request, corr int32) error {
	buf := kmsg.NewRequestFormatter(kmsg.FormatterClientID("orderpipe-embedded-broker")).AppendRequest(nil, req, corr)
	_, err := conn.Write(buf)
	return err
}

// readResponse reads the response to req (sent with corr) from conn. Only
// versions without flexible headers are read.
func readResponse(conn net.Conn, req kmsg.Request, corr int32) (kmsg.Response, error) {
	if req.IsFlexible() {
		return nil, fmt.Errorf("%s v%d: flexible versions are not read here", kmsg.NameForKey(req.Key()), req.GetVersion())
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil, err
	}
	if len(body) < 4 || int32(binary.BigEndian.Uint32(body)) != corr {
		return nil, errors.New("response with another correlation id")
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body[4:]); err != nil {
		return nil, err
	}
	return resp, nil
}

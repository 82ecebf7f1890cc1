package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"orderpipe/pkg/testenv"
)

// The suite's own Redis: a primary and its replica, two redis-server
// processes on ports of their own, each with an append-only file as
// production runs Redis (docs/deploy.md, "Redis settings production
// needs"), so a SIGKILLed process comes back with everything it
// acknowledged: it writes each command to the file before it answers
// (--appendfsync no leaves the flush to disk to the OS: a crash of the
// process, not of the machine, which is what the suite injects). Every process reaches
// Redis through the Toxiproxy proxy "redis" — a fixed address, as a VIP or a
// Sentinel-managed endpoint would be — whose upstream is the primary; a
// failover promotes the replica (REPLICAOF NO ONE) and moves the proxy to
// it. Writes the primary acknowledged but had not yet replicated are lost
// with it, as on any asynchronously replicated Redis — except, with
// Config.RedisWaitReplicas, the reserves and replays a gateway answered,
// which waited for the replica first.

// redisNode is one redis-server of the pair.
type redisNode struct {
	p    *proc
	addr string
}

// startRedis starts the primary and its replica and puts the proxy in
// front of the primary; it returns the proxy's address.
func (s *Suite) startRedis(ctx context.Context) (string, error) {
	bin := s.cfg.RedisServer
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return "", fmt.Errorf("the chaos suite runs redis-server processes of its own: %w (deploy/local/services.sh installs Redis)", err)
		}
	}
	for i, name := range []string{"redis-a", "redis-b"} {
		addr, err := freeAddr()
		if err != nil {
			return "", err
		}
		if i == 1 {
			// The replica reaches its primary through the proxy
			// "redis-repl" (its upstream follows the primary across
			// failovers), which a failover cuts first and whose
			// latency, with RedisReplLag, makes the replica lag.
			if s.redisReplLink, err = s.toxi.add("redis-repl", s.redis[0].addr); err != nil {
				return "", err
			}
			if err := s.replLag(); err != nil {
				return "", err
			}
		}
		dir := filepath.Join(s.Dir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		n := &redisNode{addr: addr}
		n.p = &proc{name: name, bin: bin, env: os.Environ(), logPath: filepath.Join(s.Dir, name+".log"), store: true,
			readyFunc: func(ctx context.Context) error { return s.redisReady(ctx, n) }}
		n.p.args = redisArgs(addr, dir, "")
		if i == 1 {
			n.p.args = redisArgs(addr, dir, s.replicaOf(s.redis[0]))
		}
		s.redis = append(s.redis, n)
		s.procs = append(s.procs, n.p)
		if err := n.p.start(); err != nil {
			return "", err
		}
		if err := n.p.waitReady(ctx, 30*time.Second); err != nil {
			return "", err
		}
	}
	return s.toxi.add("redis", s.redis[0].addr)
}

// replicaOf is the address a replica of primary replicates from: the
// primary, or the lagging link in front of it.
func (s *Suite) replicaOf(primary *redisNode) string {
	if s.redisReplLink != "" {
		return s.redisReplLink
	}
	return primary.addr
}

// replLag puts Config.RedisReplLag on the replication link (a toxic heal
// leaves alone), if set.
func (s *Suite) replLag() error {
	if s.cfg.RedisReplLag <= 0 {
		return nil
	}
	return s.toxi.keep("redis-repl", "latency", int(s.cfg.RedisReplLag.Milliseconds()))
}

// redisArgs is a redis-server command line: an append-only file and no
// snapshots, a replica of primary unless it is "".
func redisArgs(addr, dir, primary string) []string {
	host, port, _ := strings.Cut(addr, ":")
	args := []string{"--bind", host, "--port", port, "--save", "", "--appendonly", "yes", "--appendfsync", "no", "--protected-mode", "no",
		"--dir", dir, "--logfile", "", "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
		"--repl-diskless-load", "on-empty-db"}
	if primary != "" {
		ph, pp, _ := strings.Cut(primary, ":")
		args = append(args, "--replicaof", ph, pp)
	}
	return args
}

// redisReady: the node answers PING; a replica also has its link to the
// primary up (it has synced).
func (s *Suite) redisReady(ctx context.Context, n *redisNode) error {
	info, err := testenv.RedisInfo(ctx, n.addr, "replication")
	if err != nil {
		return err
	}
	if strings.Contains(info, "role:slave") && !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("%s: replica not synced with its primary yet", n.p.name)
	}
	return nil
}

// redisRoles is the current primary and replica.
func (s *Suite) redisRoles() (primary, replica *redisNode) {
	s.redisMu.Lock()
	defer s.redisMu.Unlock()
	return s.redis[s.redisPrimary], s.redis[1-s.redisPrimary]
}

// redisRestart SIGKILLs the primary and starts it again after down, from
// its append-only file: nothing it acknowledged is lost, its scripts are
// (NOSCRIPT), its replica resyncs. (A primary that came back with less
// than it acknowledged — no persistence, or appendfsync everysec on a
// crash of the machine — would empty its replica too when it resyncs, and
// lose the dedup records of requests answered 202 whose orders are not
// decided yet: no setting but persistence closes that, so the nemesis does
// not inject it; docs/benchmarks.md, "Chaos".)
func (s *Suite) redisRestart(ctx context.Context, down time.Duration) (string, error) {
	at := s.since()
	prim, _ := s.redisRoles()
	if err := prim.p.kill(); err != nil {
		return "redis-restart at " + at, err
	}
	time.Sleep(down)
	restart := s.since()
	if err := prim.p.start(); err != nil {
		return "redis-restart at " + at, err
	}
	if err := prim.p.waitReady(ctx, 30*time.Second); err != nil {
		return "redis-restart at " + at, err
	}
	return fmt.Sprintf("SIGKILL redis primary %s at %s, restarted from its append-only file at %s (%s keys)",
		prim.p.name, at, restart, dbSize(ctx, prim.addr)), nil
}

// dbSize is the number of keys of the node at addr, for the report.
func dbSize(ctx context.Context, addr string) string {
	n, err := testenv.RedisKeyCount(ctx, addr)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return fmt.Sprint(n)
}

// redisFailover cuts the replication link for promoteAfter/2 (the replica
// falls behind, as one in another zone whose link stalls), SIGKILLs the
// primary; after promoteAfter (the failure detector's delay) the replica is
// promoted and the proxy moved to it; the old primary comes back as its
// replica. Then the operator's repair. What the primary acknowledged during
// the cut is lost — with REDIS_WAIT_REPLICAS, nothing a client was shown:
// those reserves waited for the replica in vain and were answered 503.
func (s *Suite) redisFailover(ctx context.Context, promoteAfter time.Duration) (string, error) {
	at := s.since()
	old, repl := s.redisRoles()
	s.redisLost.Store(true)
	cut := promoteAfter / 2
	if err := s.toxi.blackhole("redis-repl"); err != nil {
		return "redis-failover at " + at, fmt.Errorf("cutting the replication link: %w", err)
	}
	time.Sleep(cut)
	// What the primary had written, and what the replica had when it died.
	written := replOffset(ctx, old.addr, "master_repl_offset")
	if err := old.p.kill(); err != nil {
		return "redis-failover at " + at, err
	}
	offset := replOffset(ctx, repl.addr, "slave_repl_offset")
	if err := s.toxi.remove("redis-repl", "blackhole"); err != nil {
		return "redis-failover at " + at, err
	}
	time.Sleep(promoteAfter)
	if err := testenv.PromoteRedis(ctx, repl.addr); err != nil {
		return "redis-failover at " + at, fmt.Errorf("REPLICAOF NO ONE on %s: %w", repl.p.name, err)
	}
	if err := s.toxi.upstream("redis", repl.addr); err != nil {
		return "redis-failover at " + at, fmt.Errorf("moving the redis proxy to %s: %w", repl.p.name, err)
	}
	if s.redisReplLink != "" {
		if err := s.toxi.upstream("redis-repl", repl.addr); err != nil {
			return "redis-failover at " + at, fmt.Errorf("moving the replication proxy to %s: %w", repl.p.name, err)
		}
		if err := s.replLag(); err != nil {
			return "redis-failover at " + at, err
		}
	}
	// A later restart brings the new primary back as a primary.
	repl.p.args = redisArgs(repl.addr, filepath.Join(s.Dir, repl.p.name), "")
	s.redisMu.Lock()
	s.redisPrimary = 1 - s.redisPrimary
	s.redisMu.Unlock()
	promoted := s.since()
	old.p.args = redisArgs(old.addr, filepath.Join(s.Dir, old.p.name), s.replicaOf(repl))
	if err := old.p.start(); err != nil {
		return "redis-failover at " + at, err
	}
	if err := old.p.waitReady(ctx, 30*time.Second); err != nil {
		return "redis-failover at " + at, err
	}
	desc := fmt.Sprintf("replication cut at %s for %s, SIGKILL redis primary %s (it had written offset %s, its replica %s had %s), %s promoted and the proxy moved to it at %s, %s back as its replica at %s",
		at, cut.Round(10*time.Millisecond), old.p.name, written, repl.p.name, offset, repl.p.name, promoted, old.p.name, s.since())
	fix, err := s.repairRedis(ctx)
	return desc + "; " + fix, err
}

// replOffset is the field of INFO replication of the node at addr.
func replOffset(ctx context.Context, addr, field string) string {
	info, err := testenv.RedisInfo(ctx, addr, "replication")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return v
		}
	}
	return "unknown"
}

// repairRedis is the runbook after Redis lost data: once the worker has
// consumed what was already in Kafka (a fix while events of lost journal
// entries are still queued would leave drift for the next check),
// `orderpipe reconciler --once --fix`, which rebuilds the dedup records of
// decided requests and puts the sale back on from Postgres.
func (s *Suite) repairRedis(ctx context.Context) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	caughtUp := "worker caught up"
	for {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second) // a paused broker answers nothing
		lag, err := groupLag(lctx, s.brokers, kafkaTopic, kafkaGroup)
		cancel()
		if err == nil && lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			caughtUp = fmt.Sprintf("worker not caught up within 30s (lag %d, %v)", lag, err)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	fixAt := s.since()
	code, out := s.reconcile(ctx, "--fix")
	// A failover that lost the release of the fix lock (a fix-move's fix
	// ended in the lost stretch) leaves it held until its ttl (30 s): each
	// run waits 10 s for it and exits 2; the runbook runs it again.
	for tries := 1; code == 2 && strings.Contains(out, "lock not acquired") && tries < 5; tries++ {
		fixAt += fmt.Sprintf(" (fix lock held: exit 2), again at %s", s.since())
		code, out = s.reconcile(ctx, "--fix")
	}
	desc := fmt.Sprintf("%s, reconciler --once --fix at %s exit %d (done %s)", caughtUp, fixAt, code, s.since())
	if code != 0 {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return desc, fmt.Errorf("reconciler --fix exit %d: %s", code, strings.Join(lines[max(0, len(lines)-6):], " | "))
	}
	return desc, nil
}

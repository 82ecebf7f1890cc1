package standin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Addrs is where the stand-ins of a running `orderpipe all` listen. `all`
// writes it to AddrsFile when it starts a stand-in, so that the commands a
// newcomer runs beside `make run` (locate, events, dlq, reconciler) reach the
// same Redis and Postgres: a stand-in listens on a port picked at start, not
// on the default address those commands would dial.
type Addrs struct {
	PID         int    `json:"pid"`
	RedisAddr   string `json:"redisAddr,omitempty"`
	DatabaseURL string `json:"databaseUrl,omitempty"`
}

// AddrsFile is the file of this account's running stand-ins, in the
// temporary directory ($TMPDIR).
func AddrsFile() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("orderpipe-standins-%d.json", os.Getuid()))
}

// WriteAddrs records a for the other commands of this account; remove
// deletes the record, unless a later `all` has replaced it since.
func WriteAddrs(a Addrs) (remove func(), err error) {
	b, err := json.Marshal(a)
	if err != nil {
		return func() {}, err
	}
	path := AddrsFile()
	tmp := fmt.Sprintf("%s.%d", path, a.PID)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return func() {}, fmt.Errorf("recording the stand-ins' addresses: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return func() {}, fmt.Errorf("recording the stand-ins' addresses: %w", err)
	}
	return func() {
		if cur, err := ReadAddrs(); err == nil && cur.PID == a.PID {
			os.Remove(path)
		}
	}, nil
}

// ErrNoStandins: no `orderpipe all` of this account runs stand-ins now.
var ErrNoStandins = errors.New("no running stand-ins")

// ReadAddrs is the record of the stand-ins of a running `orderpipe all`;
// ErrNoStandins when there is none or its process has ended (a record left
// by a process that was killed is ignored).
func ReadAddrs() (Addrs, error) {
	var a Addrs
	b, err := os.ReadFile(AddrsFile())
	if errors.Is(err, os.ErrNotExist) {
		return a, ErrNoStandins
	}
	if err != nil {
		return a, err
	}
	if err := json.Unmarshal(b, &a); err != nil || a.PID <= 0 {
		return Addrs{}, ErrNoStandins
	}
	if !processAlive(a.PID) {
		return Addrs{}, ErrNoStandins
	}
	return a, nil
}

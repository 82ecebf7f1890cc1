package chaos

import (
	"fmt"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/rs/zerolog"
)

// toxi is a Toxiproxy server running inside the suite, with one proxy in
// front of Postgres that the worker and the closer connect through, and one
// in front of Redis that every process connects through: the fixed address
// a VIP or a Sentinel-managed endpoint would be, whose upstream a failover
// moves to the promoted replica.
type toxi struct {
	server  *toxiproxy.ApiServer
	client  *toxiclient.Client
	proxies map[string]*toxiclient.Proxy
	// Addr is where the proxied Postgres listens.
	Addr string
}

func startToxi(upstream string) (*toxi, error) {
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	t := &toxi{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		client: toxiclient.NewClient(apiAddr), proxies: map[string]*toxiclient.Proxy{}}
	go t.server.Listen(apiAddr) //nolint:errcheck // Shutdown ends it
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := t.client.Version(); err == nil {
			break
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("toxiproxy API on %s: %w", apiAddr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if t.Addr, err = t.add("postgres", upstream); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// add creates the proxy name in front of upstream on a free port and
// returns that address.
func (t *toxi) add(name, upstream string) (string, error) {
	listen, err := freeAddr()
	if err != nil {
		return "", err
	}
	p, err := t.client.CreateProxy(name, listen, upstream)
	if err != nil {
		return "", fmt.Errorf("creating the %s proxy: %w", name, err)
	}
	t.proxies[name] = p
	return listen, nil
}

// upstream moves proxy name to another upstream; its open connections are
// closed (as a VIP moving to another host would cut them).
func (t *toxi) upstream(name, addr string) error {
	p := t.proxies[name]
	p.Upstream = addr
	return p.Save()
}

// latency delays every answer through proxy name by ms ± jitter.
func (t *toxi) latency(name string, ms, jitter int) error {
	_, err := t.proxies[name].AddToxic("latency", "latency", "downstream", 1,
		toxiclient.Attributes{"latency": ms, "jitter": jitter})
	return err
}

// bandwidth limits what flows through proxy name, both ways, to kbps KB/s.
func (t *toxi) bandwidth(name string, kbps int) error {
	for _, dir := range []string{"upstream", "downstream"} {
		if _, err := t.proxies[name].AddToxic("bandwidth-"+dir, "bandwidth", dir, 1,
			toxiclient.Attributes{"rate": kbps}); err != nil {
			return err
		}
	}
	return nil
}

// blackhole drops whatever proxy name's upstream sends (its connections
// stay open) until the toxic "blackhole" is removed.
func (t *toxi) blackhole(name string) error {
	_, err := t.proxies[name].AddToxic("blackhole", "timeout", "downstream", 1, toxiclient.Attributes{"timeout": 0})
	return err
}

// resetPeer resets every connection through proxy name (new ones too) as
// soon as the client sends anything, with the given probability per
// connection.
func (t *toxi) resetPeer(name string, toxicity float32) error {
	_, err := t.proxies[name].AddToxic("reset", "reset_peer", "upstream", toxicity, toxiclient.Attributes{"timeout": 0})
	return err
}

// keepPrefix names the toxics heal leaves: standing conditions of the run,
// not faults.
const keepPrefix = "standing-"

// keep adds a standing latency of ms on proxy name (downstream) that heal
// leaves; adding it again is a no-op.
func (t *toxi) keep(name, kind string, ms int) error {
	toxics, err := t.proxies[name].Toxics()
	if err != nil {
		return err
	}
	for _, tx := range toxics {
		if tx.Name == keepPrefix+kind {
			return nil
		}
	}
	_, err = t.proxies[name].AddToxic(keepPrefix+kind, kind, "downstream", 1, toxiclient.Attributes{"latency": ms})
	return err
}

// remove removes the toxics of proxy name.
func (t *toxi) remove(name string, toxics ...string) error {
	for _, tx := range toxics {
		if err := t.proxies[name].RemoveToxic(tx); err != nil {
			return err
		}
	}
	return nil
}

// heal removes every toxic of every proxy.
func (t *toxi) heal() error {
	for _, p := range t.proxies {
		toxics, err := p.Toxics()
		if err != nil {
			return err
		}
		for _, tx := range toxics {
			if strings.HasPrefix(tx.Name, keepPrefix) {
				continue
			}
			if err := p.RemoveToxic(tx.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *toxi) close() {
	for _, p := range t.proxies {
		p.Delete() //nolint:errcheck
	}
	t.server.Shutdown() //nolint:errcheck
}

package chaos

import (
	"fmt"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/rs/zerolog"
)

// toxi is a Toxiproxy server running inside the suite, with one proxy in
// front of Postgres that the worker and the closer connect through.
type toxi struct {
	server *toxiproxy.ApiServer
	client *toxiclient.Client
	proxy  *toxiclient.Proxy
	// Addr is where the proxied Postgres listens.
	Addr string
}

func startToxi(upstream string) (*toxi, error) {
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	t := &toxi{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		client: toxiclient.NewClient(apiAddr), Addr: listen}
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
	if t.proxy, err = t.client.CreateProxy("postgres", listen, upstream); err != nil {
		t.close()
		return nil, fmt.Errorf("creating the postgres proxy: %w", err)
	}
	return t, nil
}

// latency delays every answer from Postgres by ms ± jitter.
func (t *toxi) latency(ms, jitter int) error {
	_, err := t.proxy.AddToxic("latency", "latency", "downstream", 1,
		toxiclient.Attributes{"latency": ms, "jitter": jitter})
	return err
}

// resetPeer resets every connection (new ones too) as soon as the client
// sends anything, with the given probability per connection.
func (t *toxi) resetPeer(toxicity float32) error {
	_, err := t.proxy.AddToxic("reset", "reset_peer", "upstream", toxicity, toxiclient.Attributes{"timeout": 0})
	return err
}

// remove removes one toxic by name.
func (t *toxi) remove(name string) error { return t.proxy.RemoveToxic(name) }

// heal removes every toxic.
func (t *toxi) heal() error {
	toxics, err := t.proxy.Toxics()
	if err != nil {
		return err
	}
	for _, tx := range toxics {
		if err := t.proxy.RemoveToxic(tx.Name); err != nil {
			return err
		}
	}
	return nil
}

func (t *toxi) close() {
	if t.proxy != nil {
		t.proxy.Delete() //nolint:errcheck
	}
	t.server.Shutdown() //nolint:errcheck
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"orderpipe/pkg/invariant"
	"orderpipe/pkg/stock"
	"orderpipe/pkg/testenv"
	"orderpipe/pkg/webhook"
)

// webhookSecret is the tests' Standard Webhooks secret (32 bytes).
const webhookSecret = "whsec_dGVzdHMtd2ViaG9vay1zZWNyZXQtMzItYnl0ZXMhIQ=="

// hookRequest is a webhook as the receiver got it.
type hookRequest struct {
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// hookReceiver is a webhook endpoint on a real port that accepts all and
// keeps every request as it came.
type hookReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []hookRequest
}

func mustHookReceiver(tb testing.TB) *hookReceiver {
	h := &hookReceiver{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := hookRequest{Headers: map[string]string{}, Body: string(body)}
		for _, k := range []string{"webhook-id", "webhook-timestamp", "webhook-signature", "content-type"} {
			req.Headers[k] = r.Header.Get(k)
		}
		h.mu.Lock()
		h.got = append(h.got, req)
		h.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	tb.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) requests() []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookRequest(nil), h.got...)
}

// testWebhooksEndToEnd: orders placed, paid and cancelled through the
// gateway reach a real HTTP receiver as Standard Webhooks: one per
// orders.status event, its data the event the relay publishes, each
// order's in version order; and the official standardwebhooks library
// (Python, from PyPI) verifies every signature and refuses a tampered body.
func testWebhooksEndToEnd(t *testing.T, e engine) {
	t.Parallel()
	recv := mustHookReceiver(t)
	p := mustPipeline(t, e, components{"gateway", "worker", "relay", "webhook"}, func(c *config) {
		eps, err := webhook.ParseEndpoints([]string{recv.srv.URL + "/orderpipe"})
		if err != nil {
			t.Fatal(err)
		}
		key, err := webhook.ParseSecret(webhookSecret)
		if err != nil {
			t.Fatal(err)
		}
		c.Webhook.Endpoints, c.Webhook.Secret, c.Webhook.Interval = eps, key, 20*time.Millisecond
	})
	it := stock.Item{ActivityID: 48, ItemID: 480}
	p.mustSale(t, 48, 1, map[int64]int64{480: 10})
	var nos []string
	for u := int64(1); u <= 3; u++ {
		r := p.order(t, orderBody{RequestID: fmt.Sprintf("wh-%d", u), UserID: u, ActivityID: 48, ItemID: 480, Quantity: 1})
		nos = append(nos, r.Str("orderNo"))
	}
	for _, no := range nos {
		p.waitStatus(t, no, "UNPAID")
	}
	if _, err := p.api().Pay(contractCtx(t, "pay"), nos[0]); err != nil {
		t.Fatalf("pay: %v", err)
	}
	if r := p.cancelOrder(t, nos[1], map[string]int64{"userId": 2}); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %v", r.Status, r.Body)
	}
	p.waitDrained(t, it)
	p.assertInvariants(t, it)

	want := map[string]string{} // webhook-id → status
	for _, no := range nos {
		evs, err := p.Orders.EventsOf(context.Background(), no)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			want[webhook.MessageID(no, e.Version)] = e.Status
		}
	}
	if len(want) != 5 {
		t.Fatalf("%d events, want 5 (3 UNPAID, a PAID, a CLOSED)", len(want))
	}
	testenv.WaitFor(t, 30*time.Second, "a webhook per event", func() bool { return len(recv.requests()) >= len(want) })
	last := map[string]int{}
	for _, r := range recv.requests() {
		no, v, err := webhook.ParseMessageID(r.Headers["webhook-id"])
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Type string `json:"type"`
			Data struct {
				OrderNo string `json:"orderNo"`
				Version int    `json:"version"`
				Status  string `json:"status"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
			t.Fatalf("body %s: %v", r.Body, err)
		}
		if st := want[r.Headers["webhook-id"]]; st == "" || body.Type != "order."+strings.ToLower(st) || body.Data.OrderNo != no ||
			body.Data.Version != v || body.Data.Status != st || r.Headers["content-type"] != "application/json" {
			t.Errorf("webhook %v: %s", r.Headers, r.Body)
		}
		if v < last[no] {
			t.Errorf("order %s: version %d after %d", no, v, last[no])
		}
		last[no] = v
	}
	verifyWithOfficialLibrary(t, recv.requests())
}

// verifyWithOfficialLibrary runs the official Standard Webhooks library for
// Python over the requests: every one must verify, and the same with a
// byte of the body changed must not. The library is installed into a venv
// under ~/.cache/orderpipe (pip, from PyPI) the first time.
func verifyWithOfficialLibrary(t *testing.T, reqs []hookRequest) {
	t.Helper()
	py := mustStandardWebhooksPython(t)
	in, err := json.Marshal(reqs)
	if err != nil {
		t.Fatal(err)
	}
	script := `
import json, sys
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
hook = Webhook(sys.argv[1])
ok = refused = 0
for r in json.load(sys.stdin):
    payload = hook.verify(r["body"], r["headers"])
    assert payload["data"]["orderNo"], payload
    ok += 1
    tampered = r["body"].replace('"quantity":1', '"quantity":2')
    assert tampered != r["body"]
    try:
        hook.verify(tampered, r["headers"])
    except WebhookVerificationError:
        refused += 1
print(json.dumps({"verified": ok, "tamperedRefused": refused}))
`
	cmd := exec.Command(py, "-c", script, webhookSecret)
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the standardwebhooks library refused a webhook: %v\n%s", err, out)
	}
	var res struct{ Verified, TamperedRefused int }
	if err := json.Unmarshal(out, &res); err != nil || res.Verified != len(reqs) || res.TamperedRefused != len(reqs) {
		t.Fatalf("standardwebhooks: %s (want %d verified and as many tampered refused)", out, len(reqs))
	}
}

// mustStandardWebhooksPython is a python with the standardwebhooks package
// (PyPI) importable; the test is skipped, saying why, when there is no
// python3 here.
func mustStandardWebhooksPython(t *testing.T) string {
	t.Helper()
	sys, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the check with the official standardwebhooks library (PyPI) needs it")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	venv := filepath.Join(home, ".cache", "orderpipe", "standardwebhooks-venv")
	py := filepath.Join(venv, "bin", "python")
	if exec.Command(py, "-c", "import standardwebhooks").Run() == nil {
		return py
	}
	standardWebhooksInstall.Lock()
	defer standardWebhooksInstall.Unlock()
	for _, args := range [][]string{{sys, "-m", "venv", venv}, {py, "-m", "pip", "install", "-q", "standardwebhooks==1.1.0"}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("installing the standardwebhooks library (%s): %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return py
}

var standardWebhooksInstall sync.Mutex

// TestWebhookBadSettings: the webhook target (and all) with WEBHOOK_URLS
// set and WEBHOOK_SECRET missing or malformed, or a URL that is not
// http(s), exits 2 before anything starts, and shows neither the secret
// nor a URL's password.
func TestWebhookBadSettings(t *testing.T) {
	env := deadEnds(t)
	for _, tc := range []struct {
		cmd     string
		setting string
		env     []string
	}{
		{"webhook", "WEBHOOK_SECRET", []string{"WEBHOOK_URLS=https://hooks.example/in"}},
		{"all", "WEBHOOK_SECRET", []string{"WEBHOOK_URLS=https://hooks.example/in", "WEBHOOK_SECRET=whsec_c2hvcnQtS2V5LVNlY3JldA=="}},
		{"webhook", "WEBHOOK_SECRET", []string{"WEBHOOK_URLS=https://hooks.example/in", "WEBHOOK_SECRET=plain-Secret-0f3e-plain-Secret"}},
		{"webhook", "WEBHOOK_URLS", []string{"WEBHOOK_URLS=ftp://user:urlPw-Secret-7c1d@hooks.example/in", "WEBHOOK_SECRET=" + webhookSecret}},
		{"webhook", "WEBHOOK_RETRY_FOR", []string{"WEBHOOK_RETRY_FOR=1h"}},
	} {
		res := runBinary(t, append(env, tc.env...), tc.cmd)
		if res.code != 2 || !strings.Contains(res.stderr, "bad configuration") || !strings.Contains(res.stderr, tc.setting) {
			t.Errorf("orderpipe %s with %v: want exit 2, bad configuration naming %s: %s", tc.cmd, tc.env, tc.setting, res)
		}
		for _, s := range []string{"c2hvcnQtS2V5LVNlY3JldA", "plain-Secret-0f3e", "urlPw-Secret-7c1d", "dGVzdHMtd2ViaG9v"} {
			if strings.Contains(res.stdout+res.stderr, s) {
				t.Errorf("orderpipe %s shows the secret %s: %s", tc.cmd, s, res)
			}
		}
		if strings.Contains(res.stderr, `"msg":"starting"`) {
			t.Errorf("orderpipe %s with %v started before it stopped: %s", tc.cmd, tc.env, res)
		}
	}
}

// webhookDownFor is how long testWebhookEndpointDownForMinutes keeps its
// endpoint down.
const webhookDownFor = 2 * time.Minute

// testWebhookEndpointDownForMinutes: an endpoint that drops every
// connection for minutes while orders are placed, paid and cancelled gets
// every event once it is back — with the real backoff (1 s doubling, full
// jitter) capped at WEBHOOK_BACKOFF_MAX=20s — each order's in version
// order, every signature verifying (the one invariant checker, I7 on the
// endpoint).
func testWebhookEndpointDownForMinutes(t *testing.T, e engine) {
	t.Parallel()
	var down atomic.Bool
	var refused atomic.Int64
	var mu sync.Mutex
	var got []invariant.WebhookReceipt
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if down.Load() {
			// Down: the connection dropped, no answer.
			refused.Add(1)
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		mu.Lock()
		got = append(got, invariant.WebhookReceipt{ID: r.Header.Get("webhook-id"), Timestamp: r.Header.Get("webhook-timestamp"),
			Signature: r.Header.Get("webhook-signature"), Body: body})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	receipts := func() []invariant.WebhookReceipt {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
	key, err := webhook.ParseSecret(webhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	p := mustPipeline(t, e, components{"gateway", "worker", "relay", "webhook"}, func(c *config) {
		eps, err := webhook.ParseEndpoints([]string{srv.URL + "/orderpipe"})
		if err != nil {
			t.Fatal(err)
		}
		c.Webhook.Endpoints, c.Webhook.Secret, c.Webhook.BackoffMax = eps, key, 20*time.Second
	})
	it := stock.Item{ActivityID: 49, ItemID: 490}
	p.mustSale(t, 49, 1, map[int64]int64{490: 10})
	place := func(u int64) string {
		r := p.order(t, orderBody{RequestID: fmt.Sprintf("whd-%d", u), UserID: u, ActivityID: 49, ItemID: 490, Quantity: 1})
		no := r.Str("orderNo")
		p.waitStatus(t, no, "UNPAID")
		return no
	}
	first := place(1)
	testenv.WaitFor(t, 30*time.Second, "the first webhook while the endpoint is up", func() bool { return len(receipts()) >= 1 })

	down.Store(true)
	downAt := time.Now()
	var nos []string
	for u := int64(2); u <= 5; u++ {
		nos = append(nos, place(u))
	}
	if _, err := p.api().Pay(contractCtx(t, "pay"), first); err != nil {
		t.Fatalf("pay: %v", err)
	}
	if r := p.cancelOrder(t, nos[0], map[string]int64{"userId": 2}); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %v", r.Status, r.Body)
	}
	// The fault lasts its time: what is waited on is the outage itself.
	time.Sleep(time.Until(downAt.Add(webhookDownFor)))
	n := len(receipts())
	down.Store(false)
	if n != 1 || refused.Load() < 6 {
		t.Fatalf("while down: %d webhooks accepted (want only the first), %d attempts dropped (want at least one per event, 6)", n, refused.Load())
	}
	p.waitDrained(t, it)
	c := &invariant.Checker{Orders: p.Orders, Stock: p.Stock,
		Webhooks: []invariant.WebhookEndpoint{{Name: srv.URL, Secret: key, Receipts: receipts, Wait: 90 * time.Second}}}
	back := time.Now()
	vs, err := c.Check(context.Background(), invariant.Scope{ActivityID: 49, Items: []int64{490}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Error(v)
	}
	t.Logf("down %s: %d attempts dropped; every event there %s after it came back (%d webhooks)",
		webhookDownFor, refused.Load(), time.Since(back).Round(time.Second), len(receipts()))
}

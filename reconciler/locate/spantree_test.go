package locate

import (
	"os"
	"testing"

	"orderpipe/pkg/telemetry"
)

// TestSpanTreeFromJaeger: the spans converted from Jaeger's query documents
// (the request's trace and the batch trace it links) draw the same tree as
// the local span store's: the batch span under the message's process span
// it links, the claim, the transaction and the ack under the batch.
func TestSpanTreeFromJaeger(t *testing.T) {
	var spans []telemetry.StoredSpan
	for _, name := range []string{"jaeger-trace-request.json", "jaeger-trace-batch.json"} {
		doc, err := os.ReadFile("../../pkg/telemetry/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		s, err := telemetry.JaegerSpans(doc)
		if err != nil {
			t.Fatal(err)
		}
		spans = append(spans, s...)
	}
	const want = `POST /v1/orders  5.33ms  +0s  [orderpipe-gateway server]
├─ redis evalsha  401µs  +239µs  [orderpipe-gateway client]
└─ send orders.requested  4.36ms  +770µs  [orderpipe-gateway producer]
   └─ process orders.requested  8.89ms  +11.38ms  [orderpipe-worker consumer]
      └─ process orders.requested batch  8.98ms  +11.35ms  [orderpipe-worker consumer]
         ├─ redis evalsha  308µs  +11.57ms  [orderpipe-worker client]
         ├─ BEGIN  512µs  +12.01ms  [orderpipe-worker client]
         ├─ INSERT  2.15ms  +12.64ms  [orderpipe-worker client]
         ├─ UPDATE  1.83ms  +14.9ms  [orderpipe-worker client]
         ├─ COMMIT  2.96ms  +16.85ms  [orderpipe-worker client]
         └─ redis evalsha  240µs  +19.98ms  [orderpipe-worker client]
`
	if got := SpanTree(spans); got != want {
		t.Errorf("span tree:\n%s\nwant:\n%s", got, want)
	}
}

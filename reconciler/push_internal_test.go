package reconciler

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestPushgatewayURLNeverShowsItsPassword: a PUSHGATEWAY_URL refused, or a
// push that fails, is reported with the URL's password masked; URLs that
// could never be a Pushgateway's base are refused.
func TestPushgatewayURLNeverShowsItsPassword(t *testing.T) {
	for _, bad := range []string{"ftp://alice:hunter2@h:9091", "alice:hunter2@h:9091", "http://alice:hunter2@h:9091?x=1",
		"http://h:9091#f", "http://h:9091/metrics/job/foo", "h:9091", "http://"} {
		err := checkPushgateway(bad)
		if err == nil {
			t.Errorf("PUSHGATEWAY_URL=%s accepted", bad)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("PUSHGATEWAY_URL=%s refused as %q: the password shows", bad, err)
		}
	}
	for _, good := range []string{"http://h:9091", "https://alice:hunter2@h:9091/prefix", ""} {
		if err := checkPushgateway(good); err != nil {
			t.Errorf("PUSHGATEWAY_URL=%s refused: %v", good, err)
		}
	}
	// Nothing listens on port 1.
	err := pushPass(context.Background(), "http://alice:hunter2@127.0.0.1:1", prometheus.NewRegistry())
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a push to a closed port: %v, want an error without the password", err)
	}
	if got := redactURL("http://alice:hunter2@h:9091"); strings.Contains(got, "hunter2") {
		t.Errorf("redactURL: %s", got)
	}
}

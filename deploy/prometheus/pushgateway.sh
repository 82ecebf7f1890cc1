#!/usr/bin/env bash
# Prints the path of a Prometheus Pushgateway, fetching one when none is
# found: $PUSHGATEWAY, then `prometheus-pushgateway` on the PATH, then the
# cached copy in ${ORDERPIPE_CACHE:-~/.cache/orderpipe}/prometheus-pushgateway,
# from Debian's package (debtool.sh). The reconciler's tests push a --once
# pass's metrics to one.
exec "$(dirname "$0")/debtool.sh" PUSHGATEWAY prometheus-pushgateway prometheus-pushgateway usr/bin/prometheus-pushgateway

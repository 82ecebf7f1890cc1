#!/usr/bin/env bash
# Prints the path of a promtool (Prometheus's rule checker and rule unit-test
# runner), fetching one when none is found: $PROMTOOL, then `promtool` on the
# PATH, then the cached copy in ${ORDERPIPE_CACHE:-~/.cache/orderpipe}/prometheus,
# from Debian's `prometheus` package (debtool.sh). deploy/prometheus_test.go
# runs the alert rules' tests with it.
exec "$(dirname "$0")/debtool.sh" PROMTOOL promtool prometheus usr/bin/promtool

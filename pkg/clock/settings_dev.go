//go:build dev

package clock

import "orderpipe/pkg/setting"

// Settings are the stepped clock's environment variables: only in
// development builds (a production build refuses DEV_CLOCK_OFFSET_FILE, see
// watch_prod.go).
var Settings = []setting.Var{
	{Name: "DEV_CLOCK_OFFSET_FILE", Default: "", Help: "development builds only (the chaos suite's clock steps): a file holding a duration (-90s, +3h) added to this process's wall clock (reservedAt, order numbers, the redrive's ages, the reconciler's report time), re-read every 100 ms; the sale window goes by Redis's clock and the closer by the database's, so neither moves; a production build refuses to start with it set"},
}

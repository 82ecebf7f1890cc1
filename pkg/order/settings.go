package order

import "orderpipe/pkg/setting"

// CloseAfterVar is how long an order may stay UNPAID: the closer closes it
// after that, and the gateway and the worker show its payBy (creation +
// CLOSE_AFTER). Declared here, where the order's lifetime lives, so the
// components that read it share one default.
var CloseAfterVar = setting.Var{Name: "CLOSE_AFTER", Default: "30m",
	Help: "unpaid orders close after this Go duration; an order's payBy is its creation (reservedAt) + CLOSE_AFTER: set it the same on gateways, workers and closers"}

// CloseGraceVar bounds the clock skew between Postgres, whose clock the
// closer reads, and the gateways, whose clock stamps an order's creation.
var CloseGraceVar = setting.Var{Name: "CLOSE_GRACE", Default: "1s",
	Help: "the closer closes an order only once the database clock is this far past its payBy: the bound on how far Postgres's clock may run ahead of the gateways' (NTP keeps it to milliseconds)"}

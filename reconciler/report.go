package reconciler

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the result as one line of JSON.
func (r Result) WriteJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(r)
}

// WriteText writes the result for a human: the table of what was found and,
// after a fix, what was repaired and the table of the check that followed.
func (r Result) WriteText(w io.Writer) error {
	var b strings.Builder
	if r.After == nil && r.Fixed == nil && r.FixError == "" {
		r.Found.writeTable(&b)
	} else {
		b.WriteString("before the fix:\n")
		r.Found.writeTable(&b)
		for _, it := range r.Fixed {
			if it.Drifted() {
				fmt.Fprintf(&b, "repaired activity %d item %d: %s\n", it.ActivityID, it.ItemID, repairs(it))
			}
		}
		if r.FixError != "" {
			fmt.Fprintf(&b, "fix failed: %s\n", r.FixError)
		}
		if r.After != nil {
			b.WriteString("\nafter the fix:\n")
			r.After.writeTable(&b)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r Report) writeTable(b *strings.Builder) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTIVITY\tITEM\tREDIS STOCK\tDB STOCK\tIN FLIGHT\tEXPECTED\tDRIFT\tMISSING MARKERS\tEXTRA MARKERS\tWRONG MARKERS\tSALE\tSTATUS")
	for _, it := range r.Items {
		if it.Error != "" {
			fmt.Fprintf(tw, "%d\t%d\t-\t-\t-\t-\t-\t-\t-\t-\t-\tERROR\n", it.ActivityID, it.ItemID)
			continue
		}
		redis := it.StockKey
		if it.RedisStock != nil {
			redis = strconv.FormatInt(*it.RedisStock, 10)
		}
		status := "ok"
		if it.Drifted() {
			status = "DRIFT"
		}
		drift := "0"
		if it.Drift != 0 {
			drift = fmt.Sprintf("%+d", it.Drift)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t%s\n", it.ActivityID, it.ItemID, redis, it.DBStock,
			it.InFlight, it.ExpectedRedisStock, drift, len(it.MissingMarkers), len(it.ExtraMarkers), len(it.WrongMarkers),
			it.Sale, status)
	}
	tw.Flush()
	for _, it := range r.Items {
		switch {
		case it.Error != "":
			fmt.Fprintf(b, "activity %d item %d: could not check: %s\n", it.ActivityID, it.ItemID, it.Error)
		case it.Drifted():
			fmt.Fprintf(b, "activity %d item %d: %s\n", it.ActivityID, it.ItemID, explain(it))
		}
		if it.Error == "" && it.MarkerIndex == "incomplete" {
			fmt.Fprintf(b, "activity %d item %d: marker index incomplete (markers of an older binary, or an index Redis lost): "+
				"its markers were found by a scan of the keyspace; --fix completes the index\n", it.ActivityID, it.ItemID)
		}
	}
	fmt.Fprintf(b, "%d item(s) at %s: %d checked, %d drifted, %d could not be checked\n",
		len(r.Items), r.CheckedAt.Format(time.RFC3339), len(r.Items)-r.Errors(), r.Drifted(), r.Errors())
}

// explain says in words what drifted.
func explain(it ItemReport) string {
	var parts []string
	switch it.StockKey {
	case "missing":
		parts = append(parts, fmt.Sprintf("stock key missing in Redis (should be %d)", it.ExpectedRedisStock))
	case "invalid":
		parts = append(parts, fmt.Sprintf("stock key is not a number (should be %d)", it.ExpectedRedisStock))
	default:
		if it.Drift > 0 {
			parts = append(parts, fmt.Sprintf("Redis would sell %d unit(s) more than Postgres holds", it.Drift))
		} else if it.Drift < 0 {
			parts = append(parts, fmt.Sprintf("Redis holds back %d unit(s) Postgres still has", -it.Drift))
		}
	}
	if it.Sale != "ok" {
		parts = append(parts, "sale (window, cap) "+it.Sale)
	}
	if len(it.MissingMarkers) > 0 {
		parts = append(parts, "no marker for live order of users "+users(it.MissingMarkers))
	}
	if len(it.ExtraMarkers) > 0 {
		parts = append(parts, "marker without live order for users "+users(it.ExtraMarkers))
	}
	if len(it.WrongMarkers) > 0 {
		parts = append(parts, "marker held by a stale request for users "+users(it.WrongMarkers))
	}
	return strings.Join(parts, "; ")
}

func repairs(it ItemReport) string {
	var parts []string
	if it.StockKey != "ok" || it.Drift != 0 {
		from := it.StockKey
		if it.RedisStock != nil {
			from = strconv.FormatInt(*it.RedisStock, 10)
		}
		parts = append(parts, fmt.Sprintf("stock %s -> %d", from, it.ExpectedRedisStock))
	}
	if it.Sale != "ok" {
		parts = append(parts, "sale (window, cap) rewritten")
	}
	if n := len(it.MissingMarkers); n > 0 {
		parts = append(parts, fmt.Sprintf("%d marker(s) added", n))
	}
	if n := len(it.WrongMarkers); n > 0 {
		parts = append(parts, fmt.Sprintf("%d marker(s) handed to the live order", n))
	}
	if n := len(it.ExtraMarkers); n > 0 {
		parts = append(parts, fmt.Sprintf("%d marker(s) removed", n))
	}
	return strings.Join(parts, ", ")
}

func users(us []int64) string {
	const show = 20
	var s []string
	for i, u := range us {
		if i == show {
			s = append(s, fmt.Sprintf("… (%d in all)", len(us)))
			break
		}
		s = append(s, strconv.FormatInt(u, 10))
	}
	return strings.Join(s, ", ")
}

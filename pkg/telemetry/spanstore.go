package telemetry

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// TraceStoreEnv names the directory of the local span store: when set, every
// process appends the spans it ends to a JSON-lines file there, and
// `orderpipe locate` reads a request's trace back from it. For one machine
// (make run); production exports OTLP to a collector.
const TraceStoreEnv = "TRACE_STORE_DIR"

// StoredSpan is one span as the local store keeps it (one JSON line).
type StoredSpan struct {
	TraceID  string            `json:"traceId"`
	SpanID   string            `json:"spanId"`
	ParentID string            `json:"parentSpanId,omitempty"`
	Name     string            `json:"name"`
	Kind     string            `json:"kind"`
	Service  string            `json:"service,omitempty"`
	Start    time.Time         `json:"start"`
	End      time.Time         `json:"end"`
	Status   string            `json:"status,omitempty"` // "Error" when the span failed
	Attrs    map[string]string `json:"attributes,omitempty"`
	// Links are the spans this one links to ("<traceId>-<spanId>"): the
	// worker's batch span, in a trace of its own, links each message.
	Links []string `json:"links,omitempty"`
}

// Duration is how long the span lasted.
func (s StoredSpan) Duration() time.Duration { return s.End.Sub(s.Start) }

// FileExporter is a SpanExporter appending each span as a JSON line to a
// file of its own in a directory: one file per process, so processes never
// interleave writes.
type FileExporter struct {
	mu   sync.Mutex
	f    *os.File
	w    *bufio.Writer
	path string
}

// NewFileExporter opens (creating dir if needed) the file this process
// appends its spans to: <dir>/spans-<name>-<pid>.jsonl.
func NewFileExporter(dir, name string) (*FileExporter, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the span store %s: %w", dir, err)
	}
	path := filepath.Join(dir, "spans-"+name+"-"+strconv.Itoa(os.Getpid())+".jsonl")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the span store: %w", err)
	}
	return &FileExporter{f: f, w: bufio.NewWriter(f), path: path}, nil
}

// Path is the file the exporter appends to.
func (e *FileExporter) Path() string { return e.path }

// ExportSpans appends spans, one JSON line each, and flushes them to the file.
func (e *FileExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return nil
	}
	enc := json.NewEncoder(e.w)
	for _, sp := range spans {
		if err := enc.Encode(storedOf(sp)); err != nil {
			return fmt.Errorf("writing span: %w", err)
		}
	}
	return e.w.Flush()
}

// Shutdown flushes and closes the file.
func (e *FileExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return nil
	}
	err := e.w.Flush()
	if cerr := e.f.Close(); err == nil {
		err = cerr
	}
	e.f = nil
	return err
}

func storedOf(sp sdktrace.ReadOnlySpan) StoredSpan {
	s := StoredSpan{TraceID: sp.SpanContext().TraceID().String(), SpanID: sp.SpanContext().SpanID().String(),
		Name: sp.Name(), Kind: sp.SpanKind().String(), Start: sp.StartTime().UTC(), End: sp.EndTime().UTC(),
		Attrs: map[string]string{}}
	if sp.Parent().IsValid() {
		s.ParentID = sp.Parent().SpanID().String()
	}
	if sp.Status().Code.String() == "Error" {
		s.Status = "Error"
	}
	if res := sp.Resource(); res != nil {
		if v, ok := res.Set().Value(semconv.ServiceNameKey); ok {
			s.Service = v.AsString()
		}
	}
	for _, l := range sp.Links() {
		s.Links = append(s.Links, l.SpanContext.TraceID().String()+"-"+l.SpanContext.SpanID().String())
	}
	for _, kv := range sp.Attributes() {
		s.Attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if len(s.Attrs) == 0 {
		s.Attrs = nil
	}
	return s
}

// ReadTrace returns the spans of one trace found in the store's files
// (none: the trace was not sampled, not exported yet, or the files are gone),
// plus, one level, the traces its own spans link to, as QueryTrace reads
// Jaeger: the worker's batch span, with the Postgres and Redis spans under
// it, lives in a trace of its own, which each message's process span links.
// A span of another trace that links this one (a batch span links each of
// its messages, the relay's span each order it publishes) does not bring
// its links in: they are other requests'.
func ReadTrace(dir, traceID string) ([]StoredSpan, error) {
	files, err := filepath.Glob(filepath.Join(dir, "spans-*.jsonl"))
	if err != nil {
		return nil, err
	}
	var out []StoredSpan
	if err := scanTrace(files, traceID, &out); err != nil {
		return out, err
	}
	var linked []string
	seen := map[string]bool{traceID: true}
	for _, s := range out {
		for _, l := range s.Links {
			if t, _, _ := strings.Cut(l, "-"); !seen[t] {
				seen[t] = true
				linked = append(linked, t)
			}
		}
	}
	for _, t := range linked {
		if err := scanTrace(files, t, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// scanTrace appends the spans of trace traceID the files hold.
func scanTrace(files []string, traceID string, out *[]StoredSpan) error {
	var lines []StoredSpan
	for _, name := range files {
		if err := scanFile(name, traceID, &lines); err != nil {
			return err
		}
	}
	for _, s := range lines {
		if s.TraceID == traceID {
			*out = append(*out, s)
		}
	}
	return nil
}

func scanFile(name, needle string, out *[]StoredSpan) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("reading the span store: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), needle) {
			continue
		}
		var s StoredSpan
		if json.Unmarshal(line, &s) == nil { // a line cut short by a crash is skipped
			*out = append(*out, s)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	return nil
}

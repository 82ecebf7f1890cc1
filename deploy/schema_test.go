package deploy

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/kubectl-validate/pkg/openapiclient/groupversion"
	"sigs.k8s.io/yaml"
)

// Validation against the Kubernetes API's own OpenAPI v3 schemas, the ones
// sigs.k8s.io/kubectl-validate ships for each release (its
// pkg/openapiclient/builtins/<version>, read from the module cache through
// its groupversion loader: no cluster, no network).
//
// Why not kubectl-validate's validator package: only its v0.0.4 is served
// by the module proxy, and that validator links k8s.io/apiserver v0.30,
// which does not build against the OpenTelemetry contrib releases this
// module uses (otelhttp.WithPublicEndpoint and otelgrpc's interceptors are
// gone from them). So the schemas are kubectl-validate's and the walk below
// applies them as the API server's decoding does for what manifests get
// wrong: unknown (misspelt) fields, wrong types, out-of-range integers,
// missing required fields, duplicate keys of list-maps and sets, and
// invalid object, label and port names.

type schemaDoc struct {
	Components struct {
		Schemas map[string]*schema `json:"schemas"`
	} `json:"components"`
}

type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	Properties           map[string]*schema `json:"properties"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Items                *schema            `json:"items"`
	Required             []string           `json:"required"`
	AllOf                []*schema          `json:"allOf"`
	OneOf                []*schema          `json:"oneOf"`
	AnyOf                []*schema          `json:"anyOf"`
	Enum                 []any              `json:"enum"`
	IntOrString          bool               `json:"x-kubernetes-int-or-string"`
	PreserveUnknown      bool               `json:"x-kubernetes-preserve-unknown-fields"`
	ListType             string             `json:"x-kubernetes-list-type"`
	ListMapKeys          []string           `json:"x-kubernetes-list-map-keys"`
	GVK                  []struct {
		Group, Version, Kind string
	} `json:"x-kubernetes-group-version-kind"`
}

// k8sSchemas are the built-in schemas of one Kubernetes release.
type k8sSchemas struct {
	defs  map[string]*schema // every component schema, by name
	kinds map[string]*schema // apiVersion + " " + kind → its top-level schema
}

var (
	schemasOnce sync.Once
	schemasVal  *k8sSchemas
	schemasErr  error
)

// mustSchemas loads every group version of k8sValidatedVersion from
// kubectl-validate's module.
func mustSchemas(t *testing.T) *k8sSchemas {
	t.Helper()
	schemasOnce.Do(func() { schemasVal, schemasErr = loadSchemas() })
	if schemasErr != nil {
		t.Fatal(schemasErr)
	}
	return schemasVal
}

func loadSchemas() (*k8sSchemas, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kubectl-validate").Output()
	if err != nil {
		return nil, fmt.Errorf("locating sigs.k8s.io/kubectl-validate in the module cache: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	fsys := os.DirFS(dir)
	base := path.Join("pkg/openapiclient/builtins", k8sValidatedVersion)
	files, err := globAll(fsys, base)
	if err != nil {
		return nil, err
	}
	s := &k8sSchemas{defs: map[string]*schema{}, kinds: map[string]*schema{}}
	for _, f := range files {
		raw, err := groupversion.NewForFile(fsys, f).Schema("application/json")
		if err != nil {
			return nil, err
		}
		var doc schemaDoc
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		for name, sc := range doc.Components.Schemas {
			s.defs[name] = sc
			for _, g := range sc.GVK {
				av := g.Version
				if g.Group != "" {
					av = g.Group + "/" + g.Version
				}
				s.kinds[av+" "+g.Kind] = sc
			}
		}
	}
	if len(s.kinds) < 50 {
		return nil, fmt.Errorf("only %d kinds in %s/%s", len(s.kinds), dir, base)
	}
	return s, nil
}

// globAll lists the .json files under dir.
func globAll(fsys fs.FS, dir string) ([]string, error) {
	var out []string
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".json") {
			out = append(out, p)
		}
		return err
	})
	return out, err
}

var (
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dns1123Label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	labelValue       = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	portName         = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// validateObject checks one object (YAML) against its kind's schema.
func (s *k8sSchemas) validateObject(raw []byte) []string {
	var obj map[string]any
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		return []string{err.Error()}
	}
	av, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	sc, ok := s.kinds[av+" "+kind]
	if !ok {
		return []string{fmt.Sprintf("no schema for %s %s in Kubernetes %s", av, kind, k8sValidatedVersion)}
	}
	var errs []string
	s.walk(obj, sc, "", &errs)
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if len(name) > 253 || !dns1123Subdomain.MatchString(name) {
		errs = append(errs, fmt.Sprintf("metadata.name %q is not a DNS-1123 subdomain", name))
	}
	s.names(obj, "", &errs)
	sort.Strings(errs)
	return errs
}

// resolve follows $ref and merges allOf into one view of a schema.
func (s *k8sSchemas) resolve(sc *schema) *schema {
	for sc != nil && sc.Ref != "" {
		sc = s.defs[strings.TrimPrefix(sc.Ref, "#/components/schemas/")]
	}
	if sc == nil || len(sc.AllOf) == 0 {
		return sc
	}
	merged := *sc
	merged.AllOf = nil
	for _, part := range sc.AllOf {
		p := s.resolve(part)
		if p == nil {
			continue
		}
		if merged.Type == "" {
			merged.Type = p.Type
		}
		if merged.Format == "" {
			merged.Format = p.Format
		}
		if merged.Properties == nil {
			merged.Properties = p.Properties
		}
		if merged.AdditionalProperties == nil {
			merged.AdditionalProperties = p.AdditionalProperties
		}
		if merged.Items == nil {
			merged.Items = p.Items
		}
		merged.Required = append(merged.Required, p.Required...)
		merged.OneOf = append(merged.OneOf, p.OneOf...)
		merged.IntOrString = merged.IntOrString || p.IntOrString
		merged.PreserveUnknown = merged.PreserveUnknown || p.PreserveUnknown
		if merged.ListType == "" {
			merged.ListType, merged.ListMapKeys = p.ListType, p.ListMapKeys
		}
	}
	return &merged
}

func (s *k8sSchemas) walk(v any, sc *schema, at string, errs *[]string) {
	sc = s.resolve(sc)
	if sc == nil || v == nil {
		return
	}
	fail := func(format string, args ...any) {
		*errs = append(*errs, fmt.Sprintf("%s: %s", strings.TrimPrefix(at, "."), fmt.Sprintf(format, args...)))
	}
	if sc.IntOrString || sc.Format == "int-or-string" {
		switch v.(type) {
		case string, float64:
			return
		}
		fail("want an integer or a string, got %T", v)
		return
	}
	if len(sc.OneOf) > 0 {
		for _, alt := range sc.OneOf {
			var sub []string
			s.walk(v, alt, at, &sub)
			if len(sub) == 0 {
				return
			}
		}
		fail("matches none of its forms (%v)", v)
		return
	}
	switch sc.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			fail("want an object, got %T", v)
			return
		}
		for _, r := range sc.Required {
			if _, ok := m[r]; !ok {
				fail("required field %s missing", r)
			}
		}
		var extra *schema
		if len(sc.AdditionalProperties) > 0 && string(sc.AdditionalProperties) != "false" && string(sc.AdditionalProperties) != "true" {
			extra = &schema{}
			json.Unmarshal(sc.AdditionalProperties, extra)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch p, ok := sc.Properties[k]; {
			case ok:
				s.walk(m[k], p, at+"."+k, errs)
			case extra != nil:
				s.walk(m[k], extra, at+"."+k, errs)
			case string(sc.AdditionalProperties) == "true" || sc.PreserveUnknown || len(sc.Properties) == 0:
			default:
				fail("unknown field %q", k)
			}
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			fail("want a list, got %T", v)
			return
		}
		seen := map[string]bool{}
		for i, it := range l {
			s.walk(it, sc.Items, fmt.Sprintf("%s[%d]", at, i), errs)
			var key string
			switch sc.ListType {
			case "map":
				m, _ := it.(map[string]any)
				for _, k := range sc.ListMapKeys {
					key += fmt.Sprint(m[k]) + "/"
				}
			case "set":
				key = fmt.Sprint(it)
			default:
				continue
			}
			if seen[key] {
				fail("duplicate entry %s", strings.TrimSuffix(key, "/"))
			}
			seen[key] = true
		}
	case "string":
		if _, ok := v.(string); !ok {
			fail("want a string, got %T (%v)", v, v)
		}
	case "integer":
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) {
			fail("want an integer, got %T (%v)", v, v)
			return
		}
		if sc.Format == "int32" && (f > math.MaxInt32 || f < math.MinInt32) {
			fail("%v is out of int32", f)
		}
	case "number":
		if _, ok := v.(float64); !ok {
			fail("want a number, got %T (%v)", v, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			fail("want true or false, got %T (%v)", v, v)
		}
	}
}

// names checks what the schemas cannot say: label values and keys, container
// and port names, wherever they appear.
func (s *k8sSchemas) names(v any, at string, errs *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			p := at + "." + k
			switch {
			case (k == "labels" || k == "matchLabels") && isStringMap(c):
				for lk, lv := range c.(map[string]any) {
					name := lk
					if i := strings.LastIndex(lk, "/"); i >= 0 {
						name = lk[i+1:]
						if !dns1123Subdomain.MatchString(lk[:i]) {
							*errs = append(*errs, fmt.Sprintf("%s: label key prefix %q", p, lk))
						}
					}
					sv, _ := lv.(string)
					if len(name) > 63 || !labelValue.MatchString(name) || name == "" {
						*errs = append(*errs, fmt.Sprintf("%s: label key %q", p, lk))
					}
					if len(sv) > 63 || !labelValue.MatchString(sv) {
						*errs = append(*errs, fmt.Sprintf("%s: label value %q", p, sv))
					}
				}
			case k == "containers" || k == "initContainers":
				if l, ok := c.([]any); ok {
					for _, ct := range l {
						m, _ := ct.(map[string]any)
						if n, _ := m["name"].(string); !dns1123Label.MatchString(n) || len(n) > 63 {
							*errs = append(*errs, fmt.Sprintf("%s: container name %q", p, n))
						}
						if ports, ok := m["ports"].([]any); ok {
							for _, pt := range ports {
								pm, _ := pt.(map[string]any)
								if n, ok := pm["name"].(string); ok && (len(n) > 15 || !portName.MatchString(n)) {
									*errs = append(*errs, fmt.Sprintf("%s: port name %q", p, n))
								}
							}
						}
					}
				}
			}
			s.names(c, p, errs)
		}
	case []any:
		for i, c := range v {
			s.names(c, fmt.Sprintf("%s[%d]", at, i), errs)
		}
	}
}

func isStringMap(v any) bool {
	_, ok := v.(map[string]any)
	return ok
}

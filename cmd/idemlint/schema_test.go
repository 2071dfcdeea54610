package main_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"
)

// schema is a JSON Schema draft-04 validator for the keywords the SARIF
// 2.1.0 schema uses: $ref (local), type, enum, properties,
// additionalProperties, required, items, minItems, uniqueItems, anyOf,
// oneOf, allOf, pattern, minimum, maximum and format (uri, uri-reference,
// date-time). An unknown keyword is an error, so that the validator never
// passes a document by ignoring part of the schema.
type schema struct {
	root map[string]any
}

var known = map[string]bool{
	"$ref": true, "type": true, "enum": true, "properties": true, "additionalProperties": true,
	"required": true, "items": true, "minItems": true, "uniqueItems": true, "anyOf": true,
	"oneOf": true, "allOf": true, "pattern": true, "minimum": true, "maximum": true, "format": true,
	// annotations
	"$schema": true, "id": true, "title": true, "description": true, "default": true, "definitions": true,
}

// validate returns the document's violations of the schema, each with its
// JSON pointer.
func (s *schema) validate(doc any) []string {
	var errs []string
	s.check(s.root, doc, "", &errs)
	sort.Strings(errs)
	return errs
}

func (s *schema) check(sch map[string]any, v any, at string, errs *[]string) {
	fail := func(format string, args ...any) {
		*errs = append(*errs, fmt.Sprintf("%s: %s", "/"+strings.TrimPrefix(at, "/"), fmt.Sprintf(format, args...)))
	}
	for k := range sch {
		if !known[k] {
			fail("schema keyword %q not supported by the validator", k)
		}
	}
	if ref, ok := sch["$ref"].(string); ok {
		target, err := s.resolve(ref)
		if err != nil {
			fail("%v", err)
			return
		}
		s.check(target, v, at, errs)
		return
	}
	if t, ok := sch["type"]; ok {
		var types []string
		switch t := t.(type) {
		case string:
			types = []string{t}
		case []any:
			for _, x := range t {
				types = append(types, x.(string))
			}
		}
		if !slicesContainsType(types, v) {
			fail("type %s, want %v", typeOf(v), types)
			return
		}
	}
	if enum, ok := sch["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			found = found || reflect.DeepEqual(e, v)
		}
		if !found {
			fail("%v not in enum %v", v, enum)
		}
	}
	for _, kw := range []string{"anyOf", "oneOf", "allOf"} {
		alts, ok := sch[kw].([]any)
		if !ok {
			continue
		}
		n := 0
		var sub []string
		for _, a := range alts {
			var e []string
			s.check(a.(map[string]any), v, at, &e)
			if len(e) == 0 {
				n++
			}
			sub = append(sub, e...)
		}
		switch {
		case kw == "anyOf" && n == 0, kw == "oneOf" && n != 1, kw == "allOf" && n != len(alts):
			fail("%s: %d of %d alternatives match (%s)", kw, n, len(alts), strings.Join(sub, "; "))
		}
	}
	switch v := v.(type) {
	case map[string]any:
		props, _ := sch["properties"].(map[string]any)
		for _, r := range asStrings(sch["required"]) {
			if _, ok := v[r]; !ok {
				fail("required property %q missing", r)
			}
		}
		for k, x := range v {
			if p, ok := props[k]; ok {
				s.check(p.(map[string]any), x, at+"/"+k, errs)
				continue
			}
			switch ap := sch["additionalProperties"].(type) {
			case bool:
				if !ap {
					fail("property %q not allowed", k)
				}
			case map[string]any:
				s.check(ap, x, at+"/"+k, errs)
			}
		}
	case []any:
		if min, ok := sch["minItems"].(float64); ok && float64(len(v)) < min {
			fail("%d items, want at least %v", len(v), min)
		}
		if u, _ := sch["uniqueItems"].(bool); u {
			for i := range v {
				for j := i + 1; j < len(v); j++ {
					if reflect.DeepEqual(v[i], v[j]) {
						fail("items %d and %d are equal", i, j)
					}
				}
			}
		}
		if items, ok := sch["items"].(map[string]any); ok {
			for i, x := range v {
				s.check(items, x, fmt.Sprintf("%s/%d", at, i), errs)
			}
		}
	case string:
		if p, ok := sch["pattern"].(string); ok {
			if re, err := regexp.Compile(p); err != nil {
				fail("pattern %q: %v", p, err)
			} else if !re.MatchString(v) {
				fail("%q does not match %q", v, p)
			}
		}
		switch sch["format"] {
		case "uri":
			if u, err := url.Parse(v); err != nil || !u.IsAbs() {
				fail("%q is not an absolute URI", v)
			}
		case "uri-reference":
			if _, err := url.Parse(v); err != nil {
				fail("%q is not a URI reference: %v", v, err)
			}
		case "date-time":
			if _, err := time.Parse(time.RFC3339, v); err != nil {
				fail("%q is not a date-time: %v", v, err)
			}
		}
	case float64:
		if min, ok := sch["minimum"].(float64); ok && v < min {
			fail("%v below minimum %v", v, min)
		}
		if max, ok := sch["maximum"].(float64); ok && v > max {
			fail("%v above maximum %v", v, max)
		}
	}
}

func (s *schema) resolve(ref string) (map[string]any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("$ref %q: only local references are supported", ref)
	}
	var cur any = s.root
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
		cur = m[part]
	}
	m, ok := cur.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("$ref %q does not resolve", ref)
	}
	return m, nil
}

func typeOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case float64:
		if v == math.Trunc(v) {
			return "integer"
		}
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

func slicesContainsType(types []string, v any) bool {
	got := typeOf(v)
	for _, t := range types {
		if t == got || t == "number" && got == "integer" {
			return true
		}
	}
	return false
}

func asStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			out = append(out, x.(string))
		}
	}
	return out
}

func decodeJSON(b []byte) (any, error) {
	var v any
	err := json.Unmarshal(b, &v)
	return v, err
}

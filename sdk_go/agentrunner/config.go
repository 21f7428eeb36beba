package agentrunner

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

// ConfigError is a config value that does not match the manifest's config_schema; Field names it.
// The kit ends such a run with run.failed runner.config_invalid (details.field = Field) before Run.
type ConfigError struct {
	Field   string
	Problem string
}

func (e *ConfigError) Error() string { return fmt.Sprintf("config field %q: %s", e.Field, e.Problem) }

func typeName(t pb.ConfigFieldType) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(t.String(), "CONFIG_FIELD_TYPE_")), "_", "-")
}

// ValidateConfig applies the schema's defaults to config and checks the declared types; keys the
// schema does not declare are kept as they are (a host may pass newer fields). Integer fields come
// back as int64 (JSON numbers arrive as float64).
func ValidateConfig(schema []*pb.ConfigField, config *structpb.Struct) (map[string]any, error) {
	values := config.AsMap()
	for _, field := range schema {
		value, present := values[field.GetName()]
		if !present || value == nil {
			if d := field.GetDefaultValue(); d != nil && d.GetKind() != nil {
				if _, isNull := d.GetKind().(*structpb.Value_NullValue); !isNull {
					checked, err := checkField(field, d.AsInterface())
					if err != nil {
						return nil, err
					}
					values[field.GetName()] = checked
					continue
				}
			}
			if field.GetRequired() {
				return nil, &ConfigError{field.GetName(), "is required (" + typeName(field.GetType()) + ")"}
			}
			delete(values, field.GetName())
			continue
		}
		checked, err := checkField(field, value)
		if err != nil {
			return nil, err
		}
		values[field.GetName()] = checked
	}
	return values, nil
}

// shown is a value as an error may quote it: a secret's value never.
func shown(field *pb.ConfigField, s string) string {
	if field.GetType() == pb.ConfigFieldType_CONFIG_FIELD_TYPE_SECRET {
		return "the value"
	}
	return fmt.Sprintf("%q", s)
}

func isStringList(v any) bool {
	list, ok := v.([]any)
	if !ok {
		return false
	}
	for _, item := range list {
		if _, ok := item.(string); !ok {
			return false
		}
	}
	return true
}

func checkField(field *pb.ConfigField, value any) (any, error) {
	bad := func(format string, args ...any) error {
		return &ConfigError{field.GetName(), fmt.Sprintf(format, args...)}
	}
	switch field.GetType() {
	case pb.ConfigFieldType_CONFIG_FIELD_TYPE_STRING, pb.ConfigFieldType_CONFIG_FIELD_TYPE_TEXT,
		pb.ConfigFieldType_CONFIG_FIELD_TYPE_SECRET, pb.ConfigFieldType_CONFIG_FIELD_TYPE_SELECT,
		pb.ConfigFieldType_CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR, pb.ConfigFieldType_CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR:
		s, ok := value.(string)
		if !ok {
			return nil, bad("expected a string, got %T", value)
		}
		if field.GetType() == pb.ConfigFieldType_CONFIG_FIELD_TYPE_SELECT && len(field.GetOptions()) > 0 {
			names := []string{}
			for _, o := range field.GetOptions() {
				names = append(names, o.GetName())
			}
			if !slices.Contains(names, s) {
				return nil, bad("%q is not one of %v", s, names)
			}
		}
		if pattern := field.GetPattern(); pattern != "" {
			re, err := regexp.Compile(pattern)
			if err != nil {
				return nil, bad("the manifest's pattern %q is not a regular expression: %v", pattern, err)
			}
			if !re.MatchString(s) {
				return nil, bad("%s does not match the pattern %s", shown(field, s), pattern)
			}
		}
		return s, nil
	case pb.ConfigFieldType_CONFIG_FIELD_TYPE_INTEGER:
		f, ok := value.(float64)
		if !ok || f != math.Trunc(f) {
			return nil, bad("expected an integer, got %v", value)
		}
		return int64(f), nil
	case pb.ConfigFieldType_CONFIG_FIELD_TYPE_NUMBER:
		if _, ok := value.(float64); !ok {
			return nil, bad("expected a number, got %T", value)
		}
	case pb.ConfigFieldType_CONFIG_FIELD_TYPE_BOOLEAN:
		if _, ok := value.(bool); !ok {
			return nil, bad("expected a boolean, got %T", value)
		}
	case pb.ConfigFieldType_CONFIG_FIELD_TYPE_STRING_LIST, pb.ConfigFieldType_CONFIG_FIELD_TYPE_KNOWLEDGE_BASE_MULTI_SELECTOR:
		if !isStringList(value) {
			return nil, bad("expected a list of strings")
		}
	case pb.ConfigFieldType_CONFIG_FIELD_TYPE_PROMPT_EDITOR:
		list, ok := value.([]any)
		for _, item := range list {
			m, isMap := item.(map[string]any)
			if _, hasRole := m["role"].(string); !isMap || !hasRole {
				ok = false
			}
		}
		if !ok {
			return nil, bad("expected a list of {role, content} messages")
		}
	case pb.ConfigFieldType_CONFIG_FIELD_TYPE_MODEL_FALLBACK_SELECTOR:
		switch v := value.(type) {
		case string:
		case []any:
			if !isStringList(v) {
				return nil, bad("expected a model id, a list of ids or {primary, fallbacks}")
			}
		case map[string]any:
			if p, has := v["primary"]; has {
				if _, ok := p.(string); !ok {
					return nil, bad("expected a model id, a list of ids or {primary, fallbacks}")
				}
			}
		default:
			return nil, bad("expected a model id, a list of ids or {primary, fallbacks}")
		}
	}
	return value, nil
}

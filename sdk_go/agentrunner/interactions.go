package agentrunner

import (
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	pb "github.com/langbot-app/langbot-agentrunner/sdk_go/agentrunnerv1"
)

// Structured interaction limits (the host enforces the same; checking first turns a dropped result
// into an error where the request is built).
const (
	InteractionMaxFields  = 50
	InteractionMaxActions = 20
	InteractionMaxOptions = 100
	InteractionMaxBytes   = 256 * 1024
	InteractionMaxTTL     = 24 * time.Hour
)

func invalid(field, format string, args ...any) *Error {
	e := NewError(ReasonInvalidArgument, fmt.Sprintf(format, args...))
	e.Metadata = map[string]string{"field": field}
	return e
}

func length(value, field string, lo, hi int) *Error {
	n := utf8.RuneCountInString(value)
	if n < lo || n > hi {
		return invalid(field, "%s must have %d..%d characters (got %d)", field, lo, hi, n)
	}
	return nil
}

func unique(ids []string, what string) *Error {
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			return invalid(what, "%s id %q is used twice", what, id)
		}
		seen[id] = true
	}
	return nil
}

func choice(t pb.InteractionFieldType) bool {
	return t == pb.InteractionFieldType_INTERACTION_FIELD_TYPE_SELECT || t == pb.InteractionFieldType_INTERACTION_FIELD_TYPE_MULTISELECT
}

// CheckInteraction checks a request against the protocol limits: ids and lengths, at most 50 fields,
// 20 actions and 100 options per field, 256 KiB serialized, expiry in the future and at most 24 h
// ahead (unset: the host uses 30 minutes). It returns an *Error (INVALID_ARGUMENT, PAYLOAD_TOO_LARGE).
func CheckInteraction(req *pb.InteractionRequest) error {
	for _, e := range []*Error{
		length(req.GetInteractionId(), "interaction_id", 1, 255), length(req.GetTitle(), "title", 1, 1000),
		length(req.GetDescription(), "description", 0, 10000), length(req.GetFallbackText(), "fallback_text", 1, 20000),
	} {
		if e != nil {
			return e
		}
	}
	if len(req.GetFields()) > InteractionMaxFields {
		return invalid("fields", "an interaction has at most %d fields (got %d)", InteractionMaxFields, len(req.GetFields()))
	}
	if len(req.GetActions()) > InteractionMaxActions {
		return invalid("actions", "an interaction has at most %d actions (got %d)", InteractionMaxActions, len(req.GetActions()))
	}
	ids, hasChoice := []string{}, false
	for i, f := range req.GetFields() {
		where := fmt.Sprintf("fields[%d]", i)
		for _, e := range []*Error{length(f.GetId(), where+".id", 1, 128), length(f.GetLabel(), where+".label", 1, 512)} {
			if e != nil {
				return e
			}
		}
		switch {
		case f.GetType() == pb.InteractionFieldType_INTERACTION_FIELD_TYPE_UNSPECIFIED:
			return invalid(where+".type", "%s (%q) has no type", where, f.GetId())
		case len(f.GetOptions()) > InteractionMaxOptions:
			return invalid(where+".options", "%s has %d options; at most %d", where, len(f.GetOptions()), InteractionMaxOptions)
		case choice(f.GetType()) && len(f.GetOptions()) == 0:
			return invalid(where, "%s (%q) is a select field without options", where, f.GetId())
		}
		values := []string{}
		for j, o := range f.GetOptions() {
			if e := length(o.GetValue(), fmt.Sprintf("%s.options[%d].value", where, j), 1, 512); e != nil {
				return e
			}
			if e := length(o.GetLabel(), fmt.Sprintf("%s.options[%d].label", where, j), 1, 512); e != nil {
				return e
			}
			values = append(values, o.GetValue())
		}
		if e := unique(values, where+".option"); e != nil {
			return e
		}
		ids = append(ids, f.GetId())
		hasChoice = hasChoice || choice(f.GetType())
	}
	if e := unique(ids, "field"); e != nil {
		return e
	}
	actions := []string{}
	for i, a := range req.GetActions() {
		if e := length(a.GetId(), fmt.Sprintf("actions[%d].id", i), 1, 128); e != nil {
			return e
		}
		if e := length(a.GetLabel(), fmt.Sprintf("actions[%d].label", i), 1, 512); e != nil {
			return e
		}
		actions = append(actions, a.GetId())
	}
	if e := unique(actions, "action"); e != nil {
		return e
	}
	if req.GetKind() == pb.InteractionKind_INTERACTION_KIND_CONFIRMATION && len(actions) == 0 {
		return invalid("actions", "a confirmation needs at least one action")
	}
	if req.GetKind() == pb.InteractionKind_INTERACTION_KIND_CHOICE && len(actions) == 0 && !hasChoice {
		return invalid("actions", "a choice needs actions or a select field")
	}
	if req.GetExpiresAt() != nil {
		left := time.Until(req.GetExpiresAt().AsTime())
		if left <= 0 {
			return invalid("expires_at", "expires_at is in the past")
		}
		if left > InteractionMaxTTL {
			return invalid("expires_at", "expires_at is more than 24 hours ahead")
		}
	}
	if size := proto.Size(req); size > InteractionMaxBytes {
		return NewError(ReasonPayloadTooLarge, fmt.Sprintf("the interaction is %d bytes serialized; at most %d", size, InteractionMaxBytes))
	}
	return nil
}
